"""PTX text -> a plain module structure (kernels, parameters, registers, variables, instructions).

Only syntax lives here; meaning is given by interpreter.py.

>>> m = parse_ptx(".version 8.0\\n.target sm_90\\n.address_size 64\\n.visible .entry k(.param .u64 p)\\n{ ret; }")
>>> m.kernels["k"].params[0].name, [i.op for i in m.kernels["k"].instrs]
('p', ['ret'])
"""
from __future__ import annotations
import re, struct
from dataclasses import dataclass, field

class PTXError(RuntimeError):
  """A PTX construct the interpreter cannot parse or execute; the message names it and its line."""

TYPE_SIZE = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4, "s32": 4,
             "f32": 4, "f16x2": 4, "bf16x2": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16, "pred": 1,
             "e4m3x2": 2, "e5m2x2": 2}   # (two packed fp8: cvt's operand types only, "cvt": sm_89+ with PTX ISA 8.1+, sm_90+ with 7.8+)

@dataclass
class Operand:
  """One instruction operand. kind: reg | imm | sym | addr | vec | pair | neg.
  reg: name=register key; imm: text=literal; sym: name (+ offset); addr: base (reg key, symbol or None) + offset;
  vec: items (list of Operand, None for '_'); pair: items (two Operands, for d|p); neg: items[0] is the register."""
  kind: str
  name: str = ""
  text: str = ""
  offset: int = 0
  items: list = field(default_factory=list)

@dataclass
class Instr:
  op: str                          # e.g. "ld"
  mods: tuple[str, ...]            # e.g. ("global", "v4", "f32")
  args: list[Operand]
  pred: tuple[str, bool] | None    # (register key, negated)
  line: int
  text: str

@dataclass
class Param:
  name: str
  ptx_type: str
  size: int
  offset: int
  def __iter__(self): return iter((self.name, self.ptx_type, self.size, self.offset))  # (name, ptx_type, size, offset)

@dataclass
class Variable:
  """A .shared/.local/.global/.const variable: element type, byte size, alignment, initial bytes."""
  name: str
  space: str
  ptx_type: str
  size: int
  align: int
  init: bytes | None = None
  extern: bool = False

@dataclass
class KernelSource:
  name: str
  params: list[Param]
  regs: dict[str, str]             # register key -> declared type
  instrs: list[Instr]
  labels: dict[str, int]           # label -> instruction index
  variables: list[Variable]        # .shared / .local declared in the body
  line: int

@dataclass
class ModuleSource:
  version: str = ""
  target: str = ""
  address_size: int = 64
  kernels: dict[str, KernelSource] = field(default_factory=dict)
  variables: list[Variable] = field(default_factory=list)   # module-scope .global/.const/.shared

_NUM_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uU]?$")

def parse_int(text: str) -> int:
  """PTX integer literal (decimal, 0x hex, 0b binary, leading-0 octal, optional U suffix)."""
  t = text.rstrip("uU")
  neg = t.startswith("-")
  t = t.lstrip("+-")
  if t[:2] in ("0x", "0X"): v = int(t[2:], 16)
  elif t[:2] in ("0b", "0B"): v = int(t[2:], 2)
  elif len(t) > 1 and t[0] == "0": v = int(t, 8)
  else: v = int(t)
  return -v if neg else v

def literal_value(text: str) -> int | float:
  """Integer literals -> int; 0fXXXXXXXX / 0dXXXXXXXXXXXXXXXX (bit patterns) and decimal floats -> float."""
  t = text.strip()
  neg = t.startswith("-")
  body = t.lstrip("+-")
  if re.fullmatch(r"0[fF][0-9a-fA-F]{8}", body):
    v = struct.unpack("<f", int(body[2:], 16).to_bytes(4, "little"))[0]; return -v if neg else v
  if re.fullmatch(r"0[dD][0-9a-fA-F]{16}", body):
    v = struct.unpack("<d", int(body[2:], 16).to_bytes(8, "little"))[0]; return -v if neg else v
  if _NUM_INT.match(t): return parse_int(t)
  try: return float(t)
  except ValueError: raise PTXError(f"bad literal {text!r}") from None

def is_literal(text: str) -> bool:
  return bool(re.fullmatch(r"[-+]?(0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|0[xX][0-9a-fA-F]+[uU]?|0[bB][01]+[uU]?|\d+[uU]?|\d*\.\d+([eE][-+]?\d+)?|\d+\.\d*([eE][-+]?\d+)?|\d+[eE][-+]?\d+)", text.strip()))  # noqa: E501 (a table or constant that reads best on one line)

def _strip_comments(src: str) -> str:
  # keep newlines so statement line numbers stay right
  src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
  return re.sub(r"//[^\n]*", "", src)

def _line_of(src: str, pos: int) -> int: return src.count("\n", 0, pos) + 1

def _split_top(s: str, sep: str = ",") -> list[str]:
  """Split on `sep` outside brackets/braces/parentheses."""
  out, depth, cur = [], 0, []
  for ch in s:
    if ch in "[{(": depth += 1
    elif ch in "]})": depth -= 1
    if ch == sep and depth == 0: out.append("".join(cur)); cur = []
    else: cur.append(ch)
  if "".join(cur).strip(): out.append("".join(cur))
  return [x.strip() for x in out]

_TOKEN = re.compile(r'"[^"]*"|[{};]|[^{};"]+')
_LABEL = re.compile(r"^\s*([A-Za-z_$][\w$]*)\s*:(?!:)")

def _statements(src: str, base: int, full: str = ""):
  """Yield (kind, text, pos): kind is 'stmt', 'open', 'close' or 'label'. Braces inside a statement
  (vector operands, initializers) stay part of the statement."""
  acc, acc_pos, inner = "", None, 0
  for m in _TOKEN.finditer(src):
    tok = m.group(0)
    if acc_pos is None and tok.strip(): acc_pos = base + m.start() + (len(tok) - len(tok.lstrip()))
    if tok in "{}" and inner == 0:
      while (lm := _LABEL.match(acc)):
        yield "label", lm.group(1), acc_pos; acc = acc[lm.end():]
      if acc.strip() and tok == "{": inner, acc = 1, acc + tok; continue
      if acc.strip(): raise PTXError(f"line {_line_of(full, acc_pos or 0)}: statement without ';' before a brace: {acc.strip()[:60]!r}")
      yield ("open" if tok == "{" else "close"), tok, base + m.start(); acc, acc_pos = "", None
    elif tok == "{": inner += 1; acc += tok
    elif tok == "}": inner -= 1; acc += tok
    elif tok == ";" and inner == 0:
      while (lm := _LABEL.match(acc)):
        yield "label", lm.group(1), acc_pos; acc = acc[lm.end():]
      yield "stmt", acc.strip(), acc_pos if acc_pos is not None else base + m.start(); acc, acc_pos = "", None
    else: acc += tok
  while (lm := _LABEL.match(acc)):
    yield "label", lm.group(1), acc_pos; acc = acc[lm.end():]
  if acc.strip(): raise PTXError(f"line {_line_of(full, acc_pos or 0)}: statement without ';': {acc.strip()[:60]!r}")

_DECL_ITEM = re.compile(r"^([%A-Za-z_$][\w$%]*)\s*(?:<\s*(\d+)\s*>)?\s*(?:\[\s*(\d*)\s*\])?\s*(?:=\s*(.*))?$", re.S)

def _parse_decl(words: str, line: int) -> tuple[str, list[tuple[str, int | None, int | None, str | None]], int, set[str]]:
  """'.shared .align 4 .b8 name[24] = {...}' -> (type, [(name, count<>, array len, init)], align, other directives)."""
  toks = words.split(None)
  ty, align, other, i = None, 0, set(), 0
  while i < len(toks) and toks[i].startswith("."):
    t = toks[i][1:]
    if t == "align": align = parse_int(toks[i+1]); i += 2; continue
    if t in TYPE_SIZE: ty = t
    elif t.startswith("v") and t[1:].isdigit(): other.add(t)
    else: other.add(t)
    i += 1
  if ty is None: raise PTXError(f"line {line}: declaration without a type: {words!r}")
  items = []
  for part in _split_top(" ".join(toks[i:])):
    m = _DECL_ITEM.match(part.strip())
    if not m: raise PTXError(f"line {line}: cannot parse declaration item {part!r}")
    name, cnt, arr, init = m.groups()
    items.append((name, int(cnt) if cnt else None, (int(arr) if arr else 0) if arr is not None else None, init))
  return ty, items, align, other

def _init_bytes(ty: str, init: str | None, size: int, line: int) -> bytes | None:
  if init is None: return None
  vals = [v.strip() for v in init.strip().strip("{}").replace("{", "").replace("}", "").split(",") if v.strip()]
  fmt = {"b8": "<B", "u8": "<B", "s8": "<b", "b16": "<H", "u16": "<H", "s16": "<h", "b32": "<I", "u32": "<I", "s32": "<i",
         "b64": "<Q", "u64": "<Q", "s64": "<q", "f32": "<f", "f64": "<d"}.get(ty)
  if fmt is None: raise PTXError(f"line {line}: initializer of type .{ty} not supported")
  out = bytearray()
  for v in vals:
    if ty in ("f32", "f64"): out += struct.pack(fmt, float(literal_value(v)))
    else:
      x = literal_value(v)
      if not isinstance(x, int): raise PTXError(f"line {line}: initializer {v!r} is not an integer for .{ty}")
      out += (x % (1 << (8 * TYPE_SIZE[ty]))).to_bytes(TYPE_SIZE[ty], "little")
  return bytes(out[:size]) + bytes(max(0, size - len(out)))

def _variable(space: str, text: str, line: int) -> list[Variable]:
  ty, items, align, other = _parse_decl(text, line)
  vec = next((int(o[1:]) for o in other if o[:1] == "v" and o[1:].isdigit()), 1)
  esz = TYPE_SIZE[ty] * vec
  out = []
  for name, _cnt, arr, init in items:
    n = 1 if arr is None else arr
    out.append(Variable(name, space, ty, esz * n, align or esz, _init_bytes(ty, init, esz * n, line), extern=(arr == 0)))
  return out

def _parse_params(text: str, line: int) -> list[Param]:
  params, off = [], 0
  for p in _split_top(text):
    if not p: continue
    ty, items, align, _ = _parse_decl(p.replace(".param", "", 1), line)
    name, _cnt, arr, _ = items[0]
    size = TYPE_SIZE[ty] * (1 if arr is None else arr)
    al = align or TYPE_SIZE[ty]
    off = (off + al - 1) // al * al
    params.append(Param(name, ty, size, off)); off += size
  return params

def _operand(text: str, scope_lookup, line: int) -> Operand:
  t = text.strip()
  if t.startswith("["):
    inner = t[1:-1].strip()
    m = re.fullmatch(r"([%A-Za-z_$][\w$.%]*)?\s*(?:\+?\s*([-+]?\s*(?:0[xX][0-9a-fA-F]+|\d+)))?", inner)
    if not m: raise PTXError(f"line {line}: cannot parse address {t!r}")
    base, off = m.group(1), parse_int(m.group(2).replace(" ", "")) if m.group(2) else 0
    if base is None: return Operand("addr", name="", offset=off)
    key = scope_lookup(base)
    return Operand("addr", name=key if key else base, text="reg" if key else "sym", offset=off)
  if t.startswith("{"):
    return Operand("vec", items=[None if x == "_" else _operand(x, scope_lookup, line) for x in _split_top(t[1:-1])])
  if "|" in t:
    return Operand("pair", items=[_operand(x, scope_lookup, line) for x in t.split("|")])
  if t.startswith("!"):
    return Operand("neg", items=[_operand(t[1:], scope_lookup, line)])
  if is_literal(t): return Operand("imm", text=t)
  if t.startswith("%") or scope_lookup(t):
    key = scope_lookup(t)
    if key is None and not _is_special(t): raise PTXError(f"line {line}: undeclared register {t}")
    return Operand("reg", name=key or t)
  m = re.fullmatch(r"([A-Za-z_$][\w$]*)\s*(?:\+\s*(\w+))?", t)
  if m: return Operand("sym", name=m.group(1), offset=parse_int(m.group(2)) if m.group(2) else 0)
  raise PTXError(f"line {line}: cannot parse operand {t!r}")

SPECIAL = {"%tid", "%ntid", "%ctaid", "%nctaid", "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid",
           "%clock", "%clock64", "%lanemask_eq", "%lanemask_lt", "%lanemask_le", "%lanemask_gt", "%lanemask_ge",
           "%globaltimer", "%dynamic_smem_size", "%total_smem_size"}
def _is_special(t: str) -> bool: return t.split(".")[0] in SPECIAL

def _parse_body(body: str, base: int, src: str, kname: str) -> tuple[dict, list, dict, list]:
  regs: dict[str, str] = {}
  scopes: list[dict[str, str]] = [{}]
  instrs: list[Instr] = []
  labels: dict[str, int] = {}
  variables: list[Variable] = []
  nscope = [0]
  def lookup(name: str) -> str | None:
    for s in reversed(scopes):
      if name in s: return s[name]
    return None
  for kind, text, pos in _statements(body, base, src):
    line = _line_of(src, pos)
    if kind == "open": scopes.append({}); nscope[0] += 1; continue
    if kind == "close":
      if len(scopes) == 1: raise PTXError(f"line {line}: unbalanced '}}' in kernel {kname}")
      scopes.pop(); continue
    if kind == "label": labels[text] = len(instrs); continue
    if not text: continue
    if text.startswith(".reg"):
      ty, items, _, _ = _parse_decl(text[4:], line)
      for name, cnt, _arr, _init in items:
        names = [f"{name}{i}" for i in range(cnt)] if cnt is not None else [name]
        for nm in names:
          # registers declared in nested scopes get unique keys so shadowing cannot mix their types
          key = nm if len(scopes) == 1 else f"{nm}@{nscope[0]}"
          scopes[-1][nm] = key; regs[key] = ty
      continue
    if text.startswith((".shared", ".local")):
      sp = text.split()[0][1:]
      variables += _variable(sp, text[len(sp)+1:], line); continue
    if text.startswith((".pragma", ".loc", ".maxnreg", ".maxntid", ".reqntid", ".minnctapersm", ".maxnctapersm")): continue
    if text.startswith("."): raise PTXError(f"line {line}: unsupported directive in kernel {kname}: {text.split()[0]}")
    pred = None
    m = re.match(r"^@(!?)\s*([%\w$]+)\s+", text)
    if m:
      key = lookup(m.group(2))
      if key is None: raise PTXError(f"line {line}: undeclared guard predicate {m.group(2)}")
      pred, text = (key, m.group(1) == "!"), text[m.end():]
    parts = text.split(None, 1)
    opcode = parts[0].split(".")
    args = [_operand(a, lookup, line) for a in _split_top(parts[1])] if len(parts) > 1 else []
    ins = Instr(opcode[0], tuple(x for x in opcode[1:] if x), args, pred, line, text)
    if ins.op == "mma":   # warp matrix ops: the register count of each fragment is fixed by the variant
      from .mma import check_mma
      check_mma(ins)
    instrs.append(ins)
  return regs, instrs, labels, variables

def _matching_brace(src: str, i: int) -> int:
  depth = 0
  for j in range(i, len(src)):
    if src[j] == "{": depth += 1
    elif src[j] == "}":
      depth -= 1
      if depth == 0: return j
  raise PTXError(f"line {_line_of(src, i)}: unbalanced '{{'")

def parse_ptx(ptx_source: str) -> ModuleSource:
  """Parse a PTX module. Raises PTXError naming the line for anything it cannot read."""
  src = _strip_comments(ptx_source)
  mod = ModuleSource()
  # directives that end at the newline instead of ';'
  def directive(m):
    key, val = m.group(1), m.group(2).strip()
    if key == "version": mod.version = val
    elif key == "target": mod.target = val
    elif key == "address_size": mod.address_size = int(val)
    return "\n" * m.group(0).count("\n")
  src = re.sub(r"^[ \t]*\.(version|target|address_size|file|loc)\b([^\n]*)", directive, src, flags=re.M)
  # debug sections carry no semantics
  while (m := re.search(r"\.section\s+[\w.]+\s*\{", src)):
    e = _matching_brace(src, m.end() - 1)
    src = src[:m.start()] + "\n" * src.count("\n", m.start(), e + 1) + src[e+1:]
  pos = 0
  while pos < len(src):
    m = re.compile(r"[;{]").search(src, pos)
    if not m:
      if src[pos:].strip(): raise PTXError(f"line {_line_of(src, pos)}: unterminated text {src[pos:].strip()[:40]!r}")
      break
    head = src[pos:m.start()].strip()
    line = _line_of(src, pos + len(src[pos:m.start()]) - len(src[pos:m.start()].lstrip()))
    if m.group(0) == "{" and re.search(r"\.(entry|func)\b", head):
      end = _matching_brace(src, m.start())
      if re.search(r"\.entry\b", head):
        hm = re.search(r"\.entry\s+([\w$]+)\s*(?:\((.*)\))?", head, re.S)
        if not hm: raise PTXError(f"line {line}: cannot parse kernel header {head[:60]!r}")
        name = hm.group(1)
        params = _parse_params(hm.group(2) or "", line)
        regs, instrs, labels, variables = _parse_body(src[m.start()+1:end], m.start()+1, src, name)
        mod.kernels[name] = KernelSource(name, params, regs, instrs, labels, variables, line)
      pos = end + 1; continue   # .func bodies are skipped: calls are not supported (PTXError at the call)
    if m.group(0) == "{":   # initializer braces: read to the ';'
      e = _matching_brace(src, m.start()); semi = src.index(";", e); head = src[pos:semi].strip(); pos = semi + 1
    else: pos = m.end()
    if not head: continue
    words = head.split()
    while words and words[0] in (".visible", ".extern", ".weak", ".common"): words = words[1:]
    if not words: continue
    if words[0] in (".global", ".const", ".shared"):
      vs = _variable(words[0][1:], " ".join(words[1:]), line)
      if head.split()[0] == ".extern" and words[0] != ".shared": continue
      mod.variables += vs
    elif words[0] in (".func", ".entry"): continue   # prototypes
    else: raise PTXError(f"line {line}: unsupported module-level statement {head[:60]!r}")
  return mod
