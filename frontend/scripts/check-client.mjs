// Fails when src/api/schema.d.ts is not what openapi-typescript makes from openapi.json,
// so the committed client can never silently drift from the API.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const dir = mkdtempSync(join(tmpdir(), 'rlplane-client-'));
const fresh = join(dir, 'schema.d.ts');
try {
  execFileSync('npx', ['openapi-typescript', 'src/api/openapi.json', '-o', fresh], { stdio: 'pipe' });
  if (readFileSync(fresh, 'utf8') !== readFileSync('src/api/schema.d.ts', 'utf8')) {
    console.error('src/api/schema.d.ts is out of date with src/api/openapi.json: run `npm run gen` and commit it');
    process.exit(1);
  }
  console.log('client types are current');
} finally {
  rmSync(dir, { recursive: true, force: true });
}
