"""The CPU runner (hcqrt/cpu/device.py RUNNER_C) written in LLVM IR, for CPU_LLVM=1: a machine without a C compiler
still gets the native thread pool (built in-process by llvmlite) instead of the slower Python pool.

Same symbols, ABI and protocol as RUNNER_C: `hcqrt_run(fn, args, nargs, threads, spin)` calls `fn(args..., core)` for
core 0..threads-1 (core 0 on the calling thread) and returns 0, -1 (arguments out of range) or -2 (pthread_create
failed); `hcqrt_run_list(list, n)` runs a JIT launch list of records as the C runner's does; `hcqrt_reset()` forgets
the workers after fork. Workers spin `spin` pause iterations after a job, then sleep on a futex. Every argument is
passed as an i64 (x86-64 SysV: one register or stack slot each, so extra trailing ones are harmless); the futex
syscall gets its int arguments as i64 too (C would leave the upper halves of varargs undefined).
x86-64 only, like the ELF loader that maps it (hcqrt/cpu/elf_loader.py).

>>> all(f"define i32 @{f}(" in RUNNER_LLVM for f in ("hcqrt_run", "hcqrt_run_list")) and "@pthread_create" in RUNNER_LLVM
True
"""
MAXW, MAXARGS = 255, 63
SYS_FUTEX, FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 202, 128, 129   # x86-64 Linux

def _call_fn(n: int) -> str:
  """`call(core)` with n i64 arguments read from %a (the copied job arguments plus the core number)."""
  loads = "\n".join(f"  %p{n}_{i} = getelementptr inbounds [{MAXARGS + 1} x i64], ptr %a, i64 0, i64 {i}\n  %x{n}_{i} = load i64, ptr %p{n}_{i}" for i in range(n))
  return loads + f"\n  call void %fn({', '.join(f'i64 %x{n}_{i}' for i in range(n))})"

RUNNER_LLVM = f"""
@job_fn = internal global ptr null, align 8
@job_args = internal global [{MAXARGS + 1} x i64] zeroinitializer, align 16
@job_nargs = internal global i32 0, align 4
@nworkers = internal global i32 0, align 4
@go = internal global [{MAXW} x i32] zeroinitializer, align 16
@sleeping = internal global [{MAXW} x i32] zeroinitializer, align 16
@remaining = internal global i32 0, align 4
@caller_sleeping = internal global i32 0, align 4
@spin_limit = internal global i32 0, align 4

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i64 @syscall(i64, ...)
declare void @llvm.x86.sse2.pause()

define internal void @futex(ptr %addr, i64 %op, i64 %val) {{
  %r = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr %addr, i64 %op, i64 %val, i64 0, i64 0, i64 0)
  ret void
}}

; fn(args..., core): the first 8 arguments in registers when there are fewer than 8, else 64 (the rest on the stack)
define internal void @call(i32 %core) {{
entry:
  %a = alloca [{MAXARGS + 1} x i64], align 16
  %n = load i32, ptr @job_nargs
  %n64 = sext i32 %n to i64
  call void @llvm.memcpy.p0.p0.i64(ptr %a, ptr @job_args, i64 {8 * (MAXARGS + 1)}, i1 false)
  %slot = getelementptr inbounds [{MAXARGS + 1} x i64], ptr %a, i64 0, i64 %n64
  %c64 = sext i32 %core to i64
  store i64 %c64, ptr %slot
  %fn = load ptr, ptr @job_fn
  %few = icmp slt i32 %n, 8
  br i1 %few, label %k8, label %k64
k8:
{_call_fn(8)}
  ret void
k64:
{_call_fn(64)}
  ret void
}}
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define internal ptr @worker(ptr %arg) {{
entry:
  %w = ptrtoint ptr %arg to i64
  %gop = getelementptr inbounds [{MAXW} x i32], ptr @go, i64 0, i64 %w
  %slp = getelementptr inbounds [{MAXW} x i32], ptr @sleeping, i64 0, i64 %w
  %w32 = trunc i64 %w to i32
  %core = add i32 %w32, 1
  br label %wait
wait:                                   ; spin while go[w] == 0, then sleep on the futex
  %spin = phi i32 [ 0, %entry ], [ %spin1, %pause ], [ 0, %slept ], [ 0, %job ], [ 0, %lastw ], [ 0, %dowake ]
  %g = load atomic i32, ptr %gop acquire, align 4
  %idle = icmp eq i32 %g, 0
  br i1 %idle, label %check, label %job
check:
  %lim = load atomic i32, ptr @spin_limit monotonic, align 4
  %more = icmp slt i32 %spin, %lim
  br i1 %more, label %pause, label %sleep
pause:
  call void @llvm.x86.sse2.pause()
  %spin1 = add i32 %spin, 1
  br label %wait
sleep:
  store atomic i32 1, ptr %slp seq_cst, align 4
  %g2 = load atomic i32, ptr %gop seq_cst, align 4
  %still = icmp eq i32 %g2, 0
  br i1 %still, label %dosleep, label %slept
dosleep:
  call void @futex(ptr %gop, i64 {FUTEX_WAIT_PRIVATE}, i64 0)
  br label %slept
slept:
  store atomic i32 0, ptr %slp seq_cst, align 4
  br label %wait
job:
  call void @call(i32 %core)
  store atomic i32 0, ptr %gop release, align 4
  %old = atomicrmw sub ptr @remaining, i32 1 seq_cst
  %last = icmp eq i32 %old, 1
  br i1 %last, label %lastw, label %wait
lastw:
  %cs = load atomic i32, ptr @caller_sleeping seq_cst, align 4
  %wake = icmp ne i32 %cs, 0
  br i1 %wake, label %dowake, label %wait
dowake:
  call void @futex(ptr @remaining, i64 {FUTEX_WAKE_PRIVATE}, i64 1)
  br label %wait
}}

; start workers until there are threads - 1: 0, or -2 when pthread_create fails
define internal i32 @start_workers(i32 %threads) {{
entry:
  %tid = alloca i64, align 8
  %want = sub i32 %threads, 1
  br label %spawn
spawn:
  %nw = load i32, ptr @nworkers
  %enough = icmp sge i32 %nw, %want
  br i1 %enough, label %done, label %create
create:
  %nw64 = sext i32 %nw to i64
  %warg = inttoptr i64 %nw64 to ptr
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr %warg)
  %fail = icmp ne i32 %rc, 0
  br i1 %fail, label %nothread, label %created
nothread:
  ret i32 -2
created:
  %nw1 = add i32 %nw, 1
  store i32 %nw1, ptr @nworkers
  br label %spawn
done:
  ret i32 0
}}

define i32 @hcqrt_run(ptr %fn, ptr %args, i32 %nargs, i32 %threads, i32 %spin0) {{
entry:
  %b0 = icmp slt i32 %nargs, 0
  %b1 = icmp sgt i32 %nargs, {MAXARGS}
  %b2 = icmp slt i32 %threads, 1
  %b3 = icmp sgt i32 %threads, {MAXW + 1}
  %b01 = or i1 %b0, %b1
  %b23 = or i1 %b2, %b3
  %bad = or i1 %b01, %b23
  br i1 %bad, label %badargs, label %spawn
badargs:
  ret i32 -1
spawn:
  %st = call i32 @start_workers(i32 %threads)
  %nothread = icmp ne i32 %st, 0
  br i1 %nothread, label %badthread, label %post
badthread:
  ret i32 -2
post:
  %want = sub i32 %threads, 1
  store ptr %fn, ptr @job_fn
  store i32 %nargs, ptr @job_nargs
  store atomic i32 %spin0, ptr @spin_limit monotonic, align 4
  %nargs64 = sext i32 %nargs to i64
  %bytes = shl i64 %nargs64, 3
  call void @llvm.memcpy.p0.p0.i64(ptr @job_args, ptr %args, i64 %bytes, i1 false)
  store atomic i32 %want, ptr @remaining seq_cst, align 4
  br label %go.head
go.head:                                ; go[w] = 1 for each worker, waking the sleeping ones
  %w = phi i32 [ 0, %post ], [ %w1, %go.next ]
  %woke = phi i1 [ false, %post ], [ %woke1, %go.next ]
  %more = icmp slt i32 %w, %want
  br i1 %more, label %go.body, label %go.done
go.body:
  %w64 = sext i32 %w to i64
  %gop = getelementptr inbounds [{MAXW} x i32], ptr @go, i64 0, i64 %w64
  %slp = getelementptr inbounds [{MAXW} x i32], ptr @sleeping, i64 0, i64 %w64
  store atomic i32 1, ptr %gop seq_cst, align 4
  %s = load atomic i32, ptr %slp seq_cst, align 4
  %asleep = icmp ne i32 %s, 0
  br i1 %asleep, label %go.wake, label %go.next
go.wake:
  call void @futex(ptr %gop, i64 {FUTEX_WAKE_PRIVATE}, i64 1)
  br label %go.next
go.next:
  %woke1 = or i1 %woke, %asleep
  %w1 = add i32 %w, 1
  br label %go.head
go.done:                                ; a woken worker often lands on this very core: then do not spin
  %spin = select i1 %woke, i32 0, i32 %spin0
  call void @call(i32 0)
  br label %wait
wait:
  %i = phi i32 [ 0, %go.done ], [ %i1, %pause ], [ 0, %slept ]
  %r = load atomic i32, ptr @remaining seq_cst, align 4
  %done = icmp eq i32 %r, 0
  br i1 %done, label %exit, label %check
check:
  %spinning = icmp slt i32 %i, %spin
  br i1 %spinning, label %pause, label %sleep
pause:
  call void @llvm.x86.sse2.pause()
  %i1 = add i32 %i, 1
  br label %wait
sleep:
  store atomic i32 1, ptr @caller_sleeping seq_cst, align 4
  %r2 = load atomic i32, ptr @remaining seq_cst, align 4
  %same = icmp eq i32 %r2, %r
  br i1 %same, label %dosleep, label %slept
dosleep:
  %r64 = sext i32 %r to i64
  call void @futex(ptr @remaining, i64 {FUTEX_WAIT_PRIVATE}, i64 %r64)
  br label %slept
slept:
  store atomic i32 0, ptr @caller_sleeping seq_cst, align 4
  br label %wait
exit:
  ret i32 0
}}

; a launch list (the JIT's replay), as the C runner's hcqrt_run_list: n records [fn, nargs, threads, spin, args...]
; checked before any runs (-1 - i for a bad record i), workers started for the widest (-2 - n if one fails), then run
define i32 @hcqrt_run_list(ptr %list, i32 %n) {{
entry:
  br label %chk.head
chk.head:
  %i = phi i32 [ 0, %entry ], [ %i1, %chk.next ]
  %r = phi ptr [ %list, %entry ], [ %rn, %chk.next ]
  %most = phi i64 [ 1, %entry ], [ %most1, %chk.next ]
  %more = icmp slt i32 %i, %n
  br i1 %more, label %chk.body, label %spawn
chk.body:
  %fn = load i64, ptr %r
  %p1 = getelementptr inbounds i64, ptr %r, i64 1
  %na = load i64, ptr %p1
  %p2 = getelementptr inbounds i64, ptr %r, i64 2
  %th = load i64, ptr %p2
  %c0 = icmp eq i64 %fn, 0
  %c1 = icmp slt i64 %na, 0
  %c2 = icmp sgt i64 %na, {MAXARGS}
  %c3 = icmp slt i64 %th, 1
  %c4 = icmp sgt i64 %th, {MAXW + 1}
  %o1 = or i1 %c0, %c1
  %o2 = or i1 %c2, %c3
  %o3 = or i1 %o1, %o2
  %bad = or i1 %o3, %c4
  br i1 %bad, label %badrec, label %chk.next
badrec:
  %neg = sub i32 -1, %i
  ret i32 %neg
chk.next:
  %wider = icmp sgt i64 %th, %most
  %most1 = select i1 %wider, i64 %th, i64 %most
  %step = add i64 %na, 4
  %rn = getelementptr inbounds i64, ptr %r, i64 %step
  %i1 = add i32 %i, 1
  br label %chk.head
spawn:
  %most32 = trunc i64 %most to i32
  %st = call i32 @start_workers(i32 %most32)
  %nothread = icmp ne i32 %st, 0
  br i1 %nothread, label %badthread, label %run.head
badthread:
  %neg2 = sub i32 -2, %n
  ret i32 %neg2
run.head:
  %j = phi i32 [ 0, %spawn ], [ %j1, %run.body ]
  %q = phi ptr [ %list, %spawn ], [ %qn, %run.body ]
  %rmore = icmp slt i32 %j, %n
  br i1 %rmore, label %run.body, label %done
run.body:
  %f = load ptr, ptr %q
  %q1 = getelementptr inbounds i64, ptr %q, i64 1
  %a = load i64, ptr %q1
  %q2 = getelementptr inbounds i64, ptr %q, i64 2
  %t = load i64, ptr %q2
  %q3 = getelementptr inbounds i64, ptr %q, i64 3
  %sp = load i64, ptr %q3
  %args = getelementptr inbounds i64, ptr %q, i64 4
  %a32 = trunc i64 %a to i32
  %t32 = trunc i64 %t to i32
  %sp32 = trunc i64 %sp to i32
  %ignored = call i32 @hcqrt_run(ptr %f, ptr %args, i32 %a32, i32 %t32, i32 %sp32)
  %step2 = add i64 %a, 4
  %qn = getelementptr inbounds i64, ptr %q, i64 %step2
  %j1 = add i32 %j, 1
  br label %run.head
done:
  ret i32 0
}}

define void @hcqrt_reset() {{
  store i32 0, ptr @nworkers
  store i32 0, ptr @remaining
  store i32 0, ptr @caller_sleeping
  call void @llvm.memset.p0.i64(ptr @go, i8 0, i64 {4 * MAXW}, i1 false)
  call void @llvm.memset.p0.i64(ptr @sleeping, i8 0, i64 {4 * MAXW}, i1 false)
  ret void
}}
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
"""
