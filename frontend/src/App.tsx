import { useEffect } from 'react';
import { Navigate, Route, Routes, useNavigate } from 'react-router';
import { setUnauthorizedNavigator } from './api/unauthorized';
import { RequireAuth } from './components/RequireAuth';
import { Placeholder } from './pages/Placeholder';
import { SignIn } from './pages/SignIn';
import { RunsPage } from './pages/runs/RunsPage';
import { RunPage } from './pages/run/RunPage';
import { ChartsTab } from './pages/run/ChartsTab';
import { SamplesTab } from './pages/run/SamplesTab';
import { LogsTab } from './pages/run/LogsTab';
import { CheckpointsTab } from './pages/run/CheckpointsTab';
import { SpecTab } from './pages/run/SpecTab';
import { NewRunPage } from './pages/new/NewRunPage';
import { ComparePage } from './pages/compare/ComparePage';
import { WorkersPage } from './pages/workers/WorkersPage';
import { AdminPage } from './pages/admin/AdminPage';

export function AppRoutes() {
  const navigate = useNavigate();
  // Lets a 401 from any request route to /signin inside the SPA.
  useEffect(() => setUnauthorizedNavigator((to) => navigate(to, { replace: true })), [navigate]);
  return (
    <Routes>
      <Route path="/signin" element={<SignIn />} />
      <Route element={<RequireAuth />}>
        <Route index element={<Navigate to="/runs" replace />} />
        <Route path="/runs" element={<RunsPage />} />
        <Route path="/runs/:id" element={<RunPage />}>
          <Route index element={<ChartsTab />} />
          <Route path="samples" element={<SamplesTab />} />
          <Route path="logs" element={<LogsTab />} />
          <Route path="checkpoints" element={<CheckpointsTab />} />
          <Route path="spec" element={<SpecTab />} />
        </Route>
        <Route path="/new" element={<NewRunPage />} />
        <Route path="/compare" element={<ComparePage />} />
        <Route path="/workers" element={<WorkersPage />} />
        <Route path="/admin" element={<AdminPage />} />
        <Route path="*" element={<Placeholder title="Not found" />} />
      </Route>
    </Routes>
  );
}
