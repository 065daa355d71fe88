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
        <Route path="/new" element={<Placeholder title="New run" />} />
        <Route path="/compare" element={<Placeholder title="Compare runs" />} />
        <Route path="/workers" element={<Placeholder title="Workers" />} />
        <Route path="/admin" element={<Placeholder title="Admin" />} />
        <Route path="*" element={<Placeholder title="Not found" />} />
      </Route>
    </Routes>
  );
}
