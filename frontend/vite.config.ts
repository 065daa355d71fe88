/// <reference types="vitest/config" />
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// In dev and preview the API runs separately; RLPLANE_API points the proxy at it.
const api = process.env.RLPLANE_API ?? 'http://127.0.0.1:8000';
const proxy = { '/api': { target: api, changeOrigin: false } };

export default defineConfig({
  plugins: [react()],
  // The New run page imports the repository's examples/*.yaml as its templates.
  server: { proxy, fs: { allow: ['..'] } },
  preview: { proxy },
  build: { outDir: 'dist', chunkSizeWarningLimit: 1000 },
  test: {
    environment: 'jsdom',
    include: ['src/**/*.test.{ts,tsx}'],
    setupFiles: ['src/test/setup.ts'],
  },
});
