/// <reference types="vitest/config" />
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// In dev and preview the API runs separately; RLPLANE_API points the proxy at it.
const api = process.env.RLPLANE_API ?? 'http://127.0.0.1:8000';
const proxy = { '/api': { target: api, changeOrigin: false } };
// The test files that vi.mock a module, found by reading them: one that starts to mock is isolated without a list
// to keep up to date.
const src = fileURLToPath(new URL('src', import.meta.url));
const MOCKS_MODULES = readdirSync(src, { recursive: true, encoding: 'utf8' })
  .filter((file) => /\.test\.tsx?$/.test(file) && readFileSync(`${src}/${file}`, 'utf8').includes('vi.mock('))
  .map((file) => `src/${file}`);

export default defineConfig({
  plugins: [react()],
  // The New run page imports the repository's examples/*.yaml as its templates.
  server: { proxy, fs: { allow: ['..'] } },
  preview: { proxy },
  build: { outDir: 'dist', chunkSizeWarningLimit: 1000 },
  test: {
    environment: 'jsdom',
    setupFiles: ['src/test/setup.ts'],
    unstubGlobals: true,
    // A fresh jsdom and module graph per file cost two thirds of the suite's time. Files share them, but for
    // those that replace a module (vi.mock), which needs a module graph of its own.
    projects: [
      { extends: true, test: { name: 'own-modules', include: MOCKS_MODULES, isolate: true } },
      { extends: true, test: { name: 'shared', include: ['src/**/*.test.{ts,tsx}'], exclude: MOCKS_MODULES, isolate: false } },
    ],
  },
});
