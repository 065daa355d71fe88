"""Write the API's OpenAPI document to frontend/src/api/openapi.json, which the dashboard's typed
client is generated from (`npm run gen` in frontend/).

    python scripts/gen_openapi.py           # rewrite it
    python scripts/gen_openapi.py --check   # exit 1 if it is stale (tests)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "frontend" / "src" / "api" / "openapi.json"
sys.path.insert(0, str(ROOT))


def document() -> str:
    from api.app import create_app
    from api.settings import Settings

    with tempfile.TemporaryDirectory() as home:
        app = create_app(Settings(home=Path(home), database_url="sqlite://", dispatch=False))
        return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the committed file is current")
    args = parser.parse_args()
    text = document()
    if args.check:
        if not TARGET.exists() or json.loads(TARGET.read_text()) != json.loads(text):
            print(f"{TARGET.relative_to(ROOT)} is stale: run python scripts/gen_openapi.py, then npm run gen in frontend/")
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
