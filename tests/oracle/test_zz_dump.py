import json, sys
from pathlib import Path
sys.path.insert(0, "/work/wt/folders/tests/oracle")
from harness import run

def test_dump(tmp_path):
    runs = {f: run(f, "run_folders.py", tmp_path, check=False) for f in ("lightning", "surge")}
    out = []
    for f, r in runs.items():
        if r.returncode: out.append(f"{f} FAILED\n{r.output[-3000:]}")
    a, b = runs["lightning"].record, runs["surge"].record
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k): out.append(f"DIFF {k}\n   L {a.get(k)}\n   S {b.get(k)}")
    Path("/tmp/fold/diff.txt").write_text("\n".join(out))
    json.dump([a, b], open("/tmp/fold/records.json", "w"), indent=1)
