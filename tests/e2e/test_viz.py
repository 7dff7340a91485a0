"""VIZ: the recording of the digits training step (kernels with every compile stage, schedules, the timeline), the
page's server and static export, and the page itself loaded in headless Chromium (asserts on the DOM, screenshot)."""
import json, os, re, shutil, subprocess, sys, threading, urllib.request
import pytest
from frontend import viz
from tests.child_env import pythonpath

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

@pytest.fixture(scope="module")
def recording(tmp_path_factory):
  d = tmp_path_factory.mktemp("viz")
  env = {**os.environ, "PYTHONPATH": pythonpath(ROOT), "CPU": "1", "VIZ": "1", "VIZ_SERVE": "0", "VIZ_FILE": str(d / "digits.viz")}
  r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "profile_step.py"), "digits"], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  return d, json.loads((d / "digits.viz").read_text())

def test_recording_content(recording):
  d, data = recording
  assert (d / "digits.html").exists()   # the static page, written next to the recording
  ks = data["kernels"]
  conv = [k for k in ks if k["name"].startswith("r_") and "lowered" in k["stages"][0]["name"]]
  assert conv
  for k in ks:
    assert k["stages"][0]["name"] == "lowered" and k["stages"][1]["name"].startswith("optimized")
    assert all(n["new"] for n in k["stages"][0]["nodes"])   # the first stage made every node
    assert f"{k['name']}(" in k["src"] and k["asm"]
  # some kernel's optimization changed its graph: those nodes (and only those) are marked new
  assert any(0 < k["stages"][1]["changed"] < len(k["stages"][1]["nodes"]) for k in ks)
  assert any(k["opts"] for k in ks)
  kinds = [k["kind"] for r in data["realizes"] for k in r["kernels"]]
  assert "kernel" in kinds and any("profile_step.py:" in line for r in data["realizes"] for k in r["kernels"] for line in k["lines"])
  tracks = {e["args"]["name"] for e in data["trace"]["traceEvents"] if e["ph"] == "M"}
  assert {"host", "CPU"} <= tracks

def test_server_and_export(recording, tmp_path):
  _, data = recording
  srv = viz.make_server(data, 0)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  try: page = urllib.request.urlopen(f"http://127.0.0.1:{srv.server_address[1]}/").read().decode()
  finally: srv.shutdown(); srv.server_close()
  out = viz.export(data, str(tmp_path / "p.html"))
  assert page == open(out).read() and "const DATA = {" in page
  assert not re.search(r"""(src|href)=["']https?:""", page)   # no network: every asset inlined

def _dom(url: str, shot: str | None = None) -> str:
  """The page's DOM after its scripts ran; with `shot`, its screenshot from the same Chromium run (a launch costs seconds
  of CPU), or from a second run where this Chromium's headless mode writes no screenshot beside --dump-dom."""
  base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"]
  if shot and os.path.exists(shot): os.remove(shot)   # (the file seen below is this run's)
  r = subprocess.run([*base, "--dump-dom", *([f"--screenshot={shot}"] if shot else []), url], capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  if shot and not os.path.exists(shot): subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
  return r.stdout

def test_page_in_chromium(recording):
  if CHROMIUM is None:
    msg = "headless Chromium is not installed: apt-get install -y chromium"
    if os.environ.get("HCQRT_REQUIRE_CHROMIUM"): pytest.fail(msg)   # (CI installs it: .ci/run)
    pytest.skip(msg)
  d, data = recording
  srv = viz.make_server(data, 0)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  url = f"http://127.0.0.1:{srv.server_address[1]}/"
  try:
    i = next(j for j, k in enumerate(data["kernels"]) if k["name"].startswith("r_"))
    dom = _dom(f"{url}#kernel{i}", str(d / "kernel.png"))
    name = data["kernels"][i]["name"]
    assert len(re.findall(r'<li class="kernel[^"]*"', dom)) == len(data["kernels"])   # the kernel list
    graph = re.search(r'<svg [^>]*id="uopgraph".*?</svg>', dom, re.S).group(0)
    assert graph.count('class="node') == len(data["kernels"][i]["stages"][-1]["nodes"]) > 0   # the UOp graph rendered
    src = re.search(r'<pre id="source">(.*?)</pre>', dom, re.S).group(1)
    assert f"{name}(" in src   # the kernel's source shown
    assert re.search(r'<pre id="asm">.+</pre>', dom, re.S)
    j = max(range(len(data["realizes"])), key=lambda j: len(data["realizes"][j]["kernels"]))
    rz = _dom(f"{url}#realize{j}", str(d / "realize.png"))   # the lazy graph, one outlined box per kernel
    assert rz.count('<g class="kgroup">') == len(data["realizes"][j]["kernels"]) > 1
    assert "separate because" in rz
    tl = _dom(f"{url}#timeline", str(d / "timeline.png"))
    for track in ("host", "CPU"):
      m = re.search(rf'<g class="track" data-track="{track}">(.*?)</g>', tl, re.S)
      assert m and 'class="ev"' in m.group(1)   # events on each device's track
    assert os.path.getsize(d / "kernel.png") > 1000 and os.path.getsize(d / "timeline.png") > 1000
    print(f"screenshots: {d / 'kernel.png'} {d / 'timeline.png'}")
  finally: srv.shutdown(); srv.server_close()
  # the static export works without a server
  dom = _dom(f"file://{d / 'digits.html'}#kernel{i}")
  assert 'id="uopgraph"' in dom and 'class="node' in dom
