import { lazy, Suspense, useEffect, type ComponentType } from 'react';
import { Navigate, Route, Routes, useNavigate } from 'react-router';
import { setUnauthorizedNavigator } from './api/unauthorized';
import { RequireAuth } from './components/RequireAuth';
import { Placeholder } from './pages/Placeholder';
import { SignIn } from './pages/SignIn';
import { RunsPage } from './pages/runs/RunsPage';
import { RunPage } from './pages/run/RunPage';
import { ChartsTab } from './pages/run/ChartsTab';
import { ComparePage } from './pages/compare/ComparePage';

// Pages other than the runs list, a run's charts and Compare load on first visit, so the first screen parses less
// code (bench/dashboard.py times opening a run page in a cold browser). Compare is in the first bundle because a
// page that loads late is shown late: React holds what a Suspense boundary reveals until 300 ms after its fallback
// appeared, which delayed a 20-run Compare's first poll being read by ~250 ms (the poll had long arrived).
function page<K extends string>(load: () => Promise<Record<K, ComponentType>>, name: K) {
  const Lazy = lazy(async (): Promise<{ default: ComponentType }> => ({ default: (await load())[name] }));
  return function LazyPage() {
    return (
      <Suspense fallback={<p className="muted">Loading…</p>}>
        <Lazy />
      </Suspense>
    );
  };
}

const SamplesTab = page(() => import('./pages/run/SamplesTab'), 'SamplesTab');
const LogsTab = page(() => import('./pages/run/LogsTab'), 'LogsTab');
const CheckpointsTab = page(() => import('./pages/run/CheckpointsTab'), 'CheckpointsTab');
const SpecTab = page(() => import('./pages/run/SpecTab'), 'SpecTab');
const CodeTab = page(() => import('./pages/run/code/CodeTab'), 'CodeTab');
const NewRunPage = page(() => import('./pages/new/NewRunPage'), 'NewRunPage');
const WorkersPage = page(() => import('./pages/workers/WorkersPage'), 'WorkersPage');
const QueuesPage = page(() => import('./pages/queues/QueuesPage'), 'QueuesPage');
const UsagePage = page(() => import('./pages/usage/UsagePage'), 'UsagePage');
const AdminPage = page(() => import('./pages/admin/AdminPage'), 'AdminPage');
const PipelinesPage = page(() => import('./pages/pipelines/PipelinesPage'), 'PipelinesPage');
const PipelinePage = page(() => import('./pages/pipelines/PipelinePage'), 'PipelinePage');
const SweepsPage = page(() => import('./pages/sweeps/SweepsPage'), 'SweepsPage');
const SweepPage = page(() => import('./pages/sweeps/SweepPage'), 'SweepPage');

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
          <Route path="code" element={<CodeTab />} />
        </Route>
        <Route path="/pipelines" element={<PipelinesPage />} />
        <Route path="/pipelines/:id" element={<PipelinePage />} />
        <Route path="/sweeps" element={<SweepsPage />} />
        <Route path="/sweeps/:id" element={<SweepPage />} />
        <Route path="/new" element={<NewRunPage />} />
        <Route path="/compare" element={<ComparePage />} />
        <Route path="/workers" element={<WorkersPage />} />
        <Route path="/queues" element={<QueuesPage />} />
        <Route path="/usage" element={<UsagePage />} />
        <Route path="/admin" element={<AdminPage />} />
        <Route path="*" element={<Placeholder title="Not found" />} />
      </Route>
    </Routes>
  );
}
