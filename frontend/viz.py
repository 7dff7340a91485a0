"""VIZ: a local page that walks a program from tensors to machine code: each realize's lazy graph with its kernels
outlined, each kernel's UOp graph after every compile stage (the UOps a stage made highlighted, the stage named), its
opts, source and machine code, and the profiler's timeline.

`VIZ=1 python prog.py` records while it runs; at exit it writes `hcqrt.viz` (JSON) and the page as one self-contained
HTML file next to it, then serves the page on http://127.0.0.1:8123 (stdlib http.server; `VIZ_SERVE=0` skips the
server). Later: `python -m frontend.viz hcqrt.viz` serves it again, `--export page.html` writes the static page.
Every asset is in frontend/viz_assets: the page makes no network request.

>>> html = render_html({"realizes": [], "kernels": [], "trace": {"traceEvents": []}})
>>> "<script>" in html and "http" not in html.split("<body>")[1].replace("http://www.w3.org/2000/svg", "")
True
"""
from __future__ import annotations
import argparse, atexit, http.server, json, os, pathlib, sys
from compiler import profile, vizdata

ASSETS = pathlib.Path(__file__).parent / "viz_assets"

def collect() -> dict:
  """What this process recorded: realizes, kernels and the profiler's trace."""
  return {"realizes": vizdata.realizes, "kernels": vizdata.kernels, "trace": profile.trace()}

def save(path: str, data: dict | None = None) -> str:
  """Write the recording (collect()) as JSON to `path`; returns the path."""
  with open(path, "w") as f: json.dump(data if data is not None else collect(), f)
  return path

def render_html(data: dict) -> str:
  """The page with its CSS, script and `data` inlined: one file that opens without a server."""
  page = (ASSETS / "index.html").read_text()
  blob = json.dumps(data).replace("</", "<\\/")   # (a "</script>" inside a kernel's source must not end the script)
  return (page.replace("/*CSS*/", (ASSETS / "viz.css").read_text()).replace("/*JS*/", (ASSETS / "viz.js").read_text())
              .replace("/*DATA*/", blob))

def export(data: dict, path: str) -> str:
  """Write the static page (render_html) to `path`."""
  pathlib.Path(path).write_text(render_html(data))
  return path

def make_server(data: dict, port: int = 8123) -> http.server.HTTPServer:
  """An HTTP server on 127.0.0.1:`port` (0: any free port) that answers every GET with the page."""
  body = render_html(data).encode()
  class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
      self.send_response(200)
      self.send_header("Content-Type", "text/html; charset=utf-8"); self.send_header("Content-Length", str(len(body)))
      self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
  return http.server.HTTPServer(("127.0.0.1", port), Handler)

def serve(data: dict, port: int = 8123) -> None:
  srv = make_server(data, port)
  print(f"VIZ: serving http://127.0.0.1:{srv.server_address[1]} (Ctrl-C stops)", file=sys.stderr)
  try: srv.serve_forever()
  except KeyboardInterrupt: pass

def _at_exit() -> None:
  data = collect()
  path = save(os.environ.get("VIZ_FILE", "hcqrt.viz"), data)
  page = export(data, os.path.splitext(path)[0] + ".html")
  print(f"VIZ: {len(data['kernels'])} kernels, {len(data['realizes'])} realizes saved to {path}; static page {page}", file=sys.stderr)
  if os.environ.get("VIZ_SERVE", "1") not in ("", "0"): serve(data, int(os.environ.get("VIZ_PORT", "8123")))

def start() -> None:
  """Record for VIZ from now on (VIZ=1 calls it at import): the profiler too, and save/serve at exit."""
  vizdata.ENABLED = True
  profile.enable()
  atexit.register(_at_exit)

def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(prog="python -m frontend.viz", description="serve or export a VIZ recording")
  ap.add_argument("file", help="a .viz file (VIZ=1 writes hcqrt.viz)")
  ap.add_argument("--export", metavar="HTML", help="write the static page here instead of serving")
  ap.add_argument("--port", type=int, default=8123)
  a = ap.parse_args(argv)
  data = json.loads(pathlib.Path(a.file).read_text())
  if a.export: print(export(data, a.export))
  else: serve(data, a.port)

if __name__ == "__main__": main()
