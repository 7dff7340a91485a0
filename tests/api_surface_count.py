"""Count the Tensor methods/properties listed in ../shared/API_SURFACE.md (or the path given) that frontend.Tensor
implements and that some test under tests/ calls, and list the rest.

  python tests/api_surface_count.py [/work/shared/API_SURFACE.md]

A name counts as tested when a test file uses it as `.name` (a call, a property or `Tensor.name`) or names it as a
string ("name", as the parametrized op tables do); that is a lexical check: "called somewhere in the tests", not
"fully covered".
"""
import pathlib, re, sys

def surface_names(md: str) -> list[str]:
  text = pathlib.Path(md).read_text()
  block = text.split("Tensor methods and properties", 1)[1].split("Python operators", 1)[0]
  block = block.split(":", 1)[1] if ":" in block.split("\n", 1)[0] else block
  return sorted(set(re.findall(r"\b[a-z_A-Z][a-z_0-9A-Z]*\b", block.split("\n", 1)[1])))

def main() -> None:
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
  from frontend import Tensor
  md = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/API_SURFACE.md"
  names = surface_names(md)
  tests = "\n".join(p.read_text() for p in pathlib.Path(__file__).parent.rglob("test_*.py"))
  missing = [n for n in names if not hasattr(Tensor, n) and n not in ("grad", "requires_grad")]   # instance attributes
  untested = [n for n in names if n not in missing and not re.search(rf"\.{re.escape(n)}\b|[\"']{re.escape(n)}[\"']", tests)]
  print(f"{len(names)} names in {md}: {len(names) - len(missing) - len(untested)} implemented and tested, "
        f"{len(missing)} missing, {len(untested)} implemented but not called in tests/")
  if missing: print("missing:", " ".join(missing))
  if untested: print("untested:", " ".join(untested))

if __name__ == "__main__": main()
