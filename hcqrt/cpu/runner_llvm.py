"""The CPU runner (hcqrt/cpu/device.py RUNNER_C) written in LLVM IR, for CPU_LLVM=1: a machine without a C compiler
still gets the native thread pool (built in-process by llvmlite) instead of the slower Python pool.

Same symbols, ABI and protocol as RUNNER_C: `hcqrt_run(fn, args, nargs, threads, spin)` calls `fn(args..., core)` once
for each core 0..threads-1 (claimed in turn by the calling thread and the woken workers) and returns 0, -1 (arguments out of range) or -2 (pthread_create
failed); `hcqrt_run_list(list, n)` runs a JIT launch list of records as the C runner's does; `hcqrt_reset()` forgets
the workers after fork; `hcqrt_set_workers(n)` caps the workers a launch wakes; `hcqrt_set_cpus(list, n)` gives the CPUs workers are pinned to (each to one the caller is not
on, as the C runner does; a launch list re-pins them before each multi-core launch). Workers spin `spin` pause
iterations after a job, then sleep on a futex. Every argument is passed as an i64 (x86-64 SysV: one register or stack
slot each, so extra trailing ones are harmless); the futex syscall gets its int arguments as i64 too (C would leave the
upper halves of varargs undefined).
x86-64 only, like the ELF loader that maps it (hcqrt/cpu/elf_loader.py).

>>> all(f"define i32 @{f}(" in RUNNER_LLVM for f in ("hcqrt_run", "hcqrt_run_list")) and "@pthread_create" in RUNNER_LLVM
True
"""
MAXW, MAXARGS, MAXCPU = 255, 63, 1024
MAXCORES = 0xffff   # the most cores (chunks) one launch may have: RUNNER_C's MAXCORES (16-bit claim fields)
SYS_FUTEX, FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 202, 128, 129   # x86-64 Linux
SYS_GETTID, SYS_GETCPU, SYS_SETAFFINITY = 186, 309, 203

def _call_fn(n: int) -> str:
  """`call(core)` with n i64 arguments read from %a (the copied job arguments plus the core number)."""
  loads = "\n".join(f"  %p{n}_{i} = getelementptr inbounds [{MAXARGS + 1} x i64], ptr %a, i64 0, i64 {i}\n  %x{n}_{i} = load i64, ptr %p{n}_{i}" for i in range(n))
  return loads + f"\n  call void %fn({', '.join(f'i64 %x{n}_{i}' for i in range(n))})"

RUNNER_LLVM = f"""
@job_fn = internal global ptr null, align 8
@job_args = internal global [{MAXARGS + 1} x i64] zeroinitializer, align 16
@job_nargs = internal global i32 0, align 4
@nworkers = internal global i32 0, align 4
@maxw = internal global i32 {MAXW}, align 4
@go = internal global [{MAXW} x i32] zeroinitializer, align 16
@sleeping = internal global [{MAXW} x i32] zeroinitializer, align 16
@claim = internal global i64 0, align 8
@job_threads = internal global i32 0, align 4
@epoch = internal global i32 0, align 4
@done = internal global i32 0, align 4
@caller_sleeping = internal global i32 0, align 4
@spin_limit = internal global i32 0, align 4
@wtid = internal global [{MAXW} x i32] zeroinitializer, align 16
@cpus = internal global [{MAXCPU} x i32] zeroinitializer, align 16
@ncpus = internal global i32 0, align 4
@placed_for = internal global i32 -1, align 4

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i64 @syscall(i64, ...)
declare void @llvm.x86.sse2.pause()

define internal void @futex(ptr %addr, i64 %op, i64 %val) {{
  %r = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr %addr, i64 %op, i64 %val, i64 0, i64 0, i64 0)
  ret void
}}

; fn(args..., core) with the n arguments at %a: the first 8 in registers when there are fewer than 8, else 64 (the rest
; on the stack)
define internal void @call_with(ptr %fn, ptr %a, i32 %n, i32 %core) {{
entry:
  %n64 = sext i32 %n to i64
  %slot = getelementptr inbounds [{MAXARGS + 1} x i64], ptr %a, i64 0, i64 %n64
  %c64 = sext i32 %core to i64
  store i64 %c64, ptr %slot
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

; run cores of the job in flight until none is left unclaimed (RUNNER_C's claim_and_run): claim the next core by a
; compare-and-swap of the claim word, then copy the job (plain loads: the caller changes it only after this thread's
; `done` increment); the thread that finishes the last core wakes a sleeping caller
define internal void @claim_and_run(i1 %back) {{
entry:
  %a = alloca [{MAXARGS + 1} x i64], align 16
  br label %loop
loop:
  %v = load atomic i64, ptr @claim seq_cst, align 8
  %vn = lshr i64 %v, 16
  %hi = and i64 %vn, 65535
  %lo = and i64 %v, 65535
  %left = icmp ult i64 %lo, %hi
  br i1 %left, label %try, label %out
try:                                    ; the caller takes the first core left, a worker the last (RUNNER_C's claim_and_run)
  %vf = add i64 %v, 1
  %vb = sub i64 %v, 65536
  %v1 = select i1 %back, i64 %vb, i64 %vf
  %hi1 = sub i64 %hi, 1
  %c = select i1 %back, i64 %hi1, i64 %lo
  %pair = cmpxchg ptr @claim, i64 %v, i64 %v1 acq_rel acquire
  %ok = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %ok, label %copy, label %loop
copy:
  %fn = load ptr, ptr @job_fn, align 8
  %na = load i32, ptr @job_nargs, align 4
  %n32 = load i32, ptr @job_threads, align 4   ; (read with the job, before its last core is done: RUNNER_C reads it there too)
  br label %cp.head
cp.head:
  %i = phi i32 [ 0, %copy ], [ %i1, %cp.body ]
  %inr = icmp slt i32 %i, %na
  %inm = icmp slt i32 %i, {MAXARGS}
  %more = and i1 %inr, %inm
  br i1 %more, label %cp.body, label %run
cp.body:
  %i64 = sext i32 %i to i64
  %src = getelementptr inbounds [{MAXARGS + 1} x i64], ptr @job_args, i64 0, i64 %i64
  %x = load i64, ptr %src, align 8
  %dst = getelementptr inbounds [{MAXARGS + 1} x i64], ptr %a, i64 0, i64 %i64
  store i64 %x, ptr %dst
  %i1 = add i32 %i, 1
  br label %cp.head
run:
  %c32 = trunc i64 %c to i32
  call void @call_with(ptr %fn, ptr %a, i32 %na, i32 %c32)
  %d0 = atomicrmw add ptr @done, i32 1 seq_cst
  %d1 = add i32 %d0, 1
  %last = icmp eq i32 %d1, %n32
  br i1 %last, label %chk, label %loop
chk:
  %cs = load atomic i32, ptr @caller_sleeping seq_cst, align 4
  %wake = icmp ne i32 %cs, 0
  br i1 %wake, label %dowake, label %loop
dowake:
  call void @futex(ptr @done, i64 {FUTEX_WAKE_PRIVATE}, i64 1)
  br label %loop
out:
  ret void
}}

define internal ptr @worker(ptr %arg) {{
entry:
  %w = ptrtoint ptr %arg to i64
  %gop = getelementptr inbounds [{MAXW} x i32], ptr @go, i64 0, i64 %w
  %slp = getelementptr inbounds [{MAXW} x i32], ptr @sleeping, i64 0, i64 %w
  %tid = call i64 (i64, ...) @syscall(i64 {SYS_GETTID})
  %tid32 = trunc i64 %tid to i32
  %tidp = getelementptr inbounds [{MAXW} x i32], ptr @wtid, i64 0, i64 %w
  store atomic i32 %tid32, ptr %tidp release, align 4
  br label %wait
wait:                                   ; spin while go[w] == 0, then sleep on the futex
  %spin = phi i32 [ 0, %entry ], [ %spin1, %pause ], [ 0, %slept ], [ 0, %job ]
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
job:                                    ; a job was posted: take what is left of it
  store atomic i32 0, ptr %gop seq_cst, align 4
  call void @claim_and_run(i1 true)
  br label %wait
}}

; the workers a launch on %threads cores wakes: threads - 1, at most @maxw (RUNNER_C's maxw)
define internal i32 @wanted(i32 %threads) {{
  %w = sub i32 %threads, 1
  %m = load i32, ptr @maxw
  %less = icmp slt i32 %w, %m
  %r = select i1 %less, i32 %w, i32 %m
  ret i32 %r
}}

; start workers until there are wanted(threads): 0, or -2 when pthread_create fails
define internal i32 @start_workers(i32 %threads) {{
entry:
  %tid = alloca i64, align 8
  %want = call i32 @wanted(i32 %threads)
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
created:                                ; wait for its thread id (place() pins by it)
  %tidp = getelementptr inbounds [{MAXW} x i32], ptr @wtid, i64 0, i64 %nw64
  %t = load atomic i32, ptr %tidp acquire, align 4
  %started = icmp ne i32 %t, 0
  br i1 %started, label %counted, label %waittid
waittid:
  call void @llvm.x86.sse2.pause()
  br label %created
counted:
  %nw1 = add i32 %nw, 1
  store i32 %nw1, ptr @nworkers
  store i32 -1, ptr @placed_for
  br label %spawn
done:
  ret i32 0
}}

; pin worker w to the w-th of the CPUs other than the caller's (cycling); nothing while the caller stays on the CPU
; the workers were placed for, or with fewer than 2 CPUs given. A refused pin leaves that worker as it is.
define internal void @place() {{
entry:
  %cpu = alloca i32, align 4
  %mask = alloca [{MAXCPU // 64} x i64], align 16
  %others = alloca [{MAXCPU} x i32], align 16
  %nc = load i32, ptr @ncpus
  %few = icmp slt i32 %nc, 2
  br i1 %few, label %ret, label %ask
ask:
  store i32 0, ptr %cpu
  %rc = call i64 (i64, ...) @syscall(i64 {SYS_GETCPU}, ptr %cpu, i64 0, i64 0)
  %failed = icmp ne i64 %rc, 0
  %c = load i32, ptr %cpu
  %pf = load i32, ptr @placed_for
  %same = icmp eq i32 %c, %pf
  %skip = or i1 %failed, %same
  br i1 %skip, label %ret, label %collect
collect:
  store i32 %c, ptr @placed_for
  br label %col.head
col.head:
  %i = phi i32 [ 0, %collect ], [ %i1, %col.next ]
  %n = phi i32 [ 0, %collect ], [ %n1, %col.next ]
  %more = icmp slt i32 %i, %nc
  br i1 %more, label %col.body, label %pin.start
col.body:
  %i64 = sext i32 %i to i64
  %cp = getelementptr inbounds [{MAXCPU} x i32], ptr @cpus, i64 0, i64 %i64
  %ci = load i32, ptr %cp
  %isme = icmp eq i32 %ci, %c
  br i1 %isme, label %col.next, label %col.add
col.add:
  %n64 = sext i32 %n to i64
  %op = getelementptr inbounds [{MAXCPU} x i32], ptr %others, i64 0, i64 %n64
  store i32 %ci, ptr %op
  %nadd = add i32 %n, 1
  br label %col.next
col.next:
  %n1 = phi i32 [ %n, %col.body ], [ %nadd, %col.add ]
  %i1 = add i32 %i, 1
  br label %col.head
pin.start:
  %none = icmp eq i32 %n, 0
  %nw = load i32, ptr @nworkers
  br i1 %none, label %ret, label %pin.head
pin.head:
  %w = phi i32 [ 0, %pin.start ], [ %w1, %pin.body ]
  %pm = icmp slt i32 %w, %nw
  br i1 %pm, label %pin.body, label %ret
pin.body:
  call void @llvm.memset.p0.i64(ptr %mask, i8 0, i64 {MAXCPU // 8}, i1 false)
  %k = urem i32 %w, %n
  %k64 = zext i32 %k to i64
  %tp = getelementptr inbounds [{MAXCPU} x i32], ptr %others, i64 0, i64 %k64
  %t = load i32, ptr %tp
  %word = lshr i32 %t, 6
  %bit = and i32 %t, 63
  %word64 = zext i32 %word to i64
  %bit64 = zext i32 %bit to i64
  %mp = getelementptr inbounds [{MAXCPU // 64} x i64], ptr %mask, i64 0, i64 %word64
  %one = shl i64 1, %bit64
  store i64 %one, ptr %mp
  %w64 = sext i32 %w to i64
  %tidp = getelementptr inbounds [{MAXW} x i32], ptr @wtid, i64 0, i64 %w64
  %tid = load i32, ptr %tidp
  %tid64 = sext i32 %tid to i64
  %r2 = call i64 (i64, ...) @syscall(i64 {SYS_SETAFFINITY}, i64 %tid64, i64 {MAXCPU // 8}, ptr %mask)
  %w1 = add i32 %w, 1
  br label %pin.head
ret:
  ret void
}}

define i32 @hcqrt_run(ptr %fn, ptr %args, i32 %nargs, i32 %threads, i32 %spin0) {{
entry:
  %r = call i32 @run_impl(ptr %fn, ptr %args, i32 %nargs, i32 %threads, i32 %spin0, i1 true)
  ret i32 %r
}}

; one launch; %doplace: pin the workers first, away from the CPU the caller runs on now
define internal i32 @run_impl(ptr %fn, ptr %args, i32 %nargs, i32 %threads, i32 %spin0, i1 %doplace) {{
entry:
  %b0 = icmp slt i32 %nargs, 0
  %b1 = icmp sgt i32 %nargs, {MAXARGS}
  %b2 = icmp slt i32 %threads, 1
  %b3 = icmp sgt i32 %threads, {MAXCORES}
  %b01 = or i1 %b0, %b1
  %b23 = or i1 %b2, %b3
  %bad = or i1 %b01, %b23
  br i1 %bad, label %badargs, label %spawn
badargs:
  ret i32 -1
spawn:
  %st = call i32 @start_workers(i32 %threads)
  %nothread = icmp ne i32 %st, 0
  br i1 %nothread, label %badthread, label %placing
badthread:
  ret i32 -2
placing:
  %multi = icmp sgt i32 %threads, 1
  %pl = and i1 %doplace, %multi
  br i1 %pl, label %doplacing, label %post
doplacing:
  call void @place()
  br label %post
post:
  %want = call i32 @wanted(i32 %threads)
  store ptr %fn, ptr @job_fn
  store i32 %nargs, ptr @job_nargs
  store atomic i32 %spin0, ptr @spin_limit monotonic, align 4
  %nargs64 = sext i32 %nargs to i64
  %bytes = shl i64 %nargs64, 3
  call void @llvm.memcpy.p0.p0.i64(ptr @job_args, ptr %args, i64 %bytes, i1 false)
  store atomic i32 0, ptr @done monotonic, align 4
  store i32 %threads, ptr @job_threads
  %e0 = load i32, ptr @epoch
  %e1 = add i32 %e0, 1
  store i32 %e1, ptr @epoch
  %e64 = zext i32 %e1 to i64
  %eh = shl i64 %e64, 32
  %t64 = zext i32 %threads to i64
  %th = shl i64 %t64, 16
  %cw = or i64 %eh, %th
  store atomic i64 %cw, ptr @claim seq_cst, align 8   ; (publishes the job: epoch << 32 | cores << 16 | next core 0)
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
go.done:                                ; unpinned, a woken worker often lands on this very core: then do not spin
  %ncp = load i32, ptr @ncpus
  %unpinned = icmp slt i32 %ncp, 2
  %nospin = and i1 %woke, %unpinned
  %spin = select i1 %nospin, i32 0, i32 %spin0
  call void @claim_and_run(i1 false)
  br label %wait
wait:                                   ; every core claimed: wait for the ones workers run to finish
  %i = phi i32 [ 0, %go.done ], [ %i1, %pause ], [ 0, %slept ]
  %r = load atomic i32, ptr @done seq_cst, align 4
  %fin = icmp eq i32 %r, %threads
  br i1 %fin, label %exit, label %check
check:
  %spinning = icmp slt i32 %i, %spin
  br i1 %spinning, label %pause, label %sleep
pause:
  call void @llvm.x86.sse2.pause()
  %i1 = add i32 %i, 1
  br label %wait
sleep:
  store atomic i32 1, ptr @caller_sleeping seq_cst, align 4
  %r2 = load atomic i32, ptr @done seq_cst, align 4
  %same = icmp eq i32 %r2, %r
  br i1 %same, label %dosleep, label %slept
dosleep:
  %r64 = sext i32 %r to i64
  call void @futex(ptr @done, i64 {FUTEX_WAIT_PRIVATE}, i64 %r64)
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
  %c4 = icmp sgt i64 %th, {MAXCORES}
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
  br i1 %nothread, label %badthread, label %placing
badthread:
  %neg2 = sub i32 -2, %n
  ret i32 %neg2
placing:
  br label %run.head
run.head:
  %j = phi i32 [ 0, %placing ], [ %j1, %run.body ]
  %q = phi ptr [ %list, %placing ], [ %qn, %run.body ]
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
  ; (each multi-core launch pins the workers away from the CPU the caller runs on then: RUNNER_C's hcqrt_run_list)
  %ignored = call i32 @run_impl(ptr %f, ptr %args, i32 %a32, i32 %t32, i32 %sp32, i1 true)
  %step2 = add i64 %a, 4
  %qn = getelementptr inbounds i64, ptr %q, i64 %step2
  %j1 = add i32 %j, 1
  br label %run.head
done:
  ret i32 0
}}

; n pause instructions (RUNNER_C's hcqrt_pause_loop: timed by the owner to turn a spin time into iterations)
define void @hcqrt_pause_loop(i32 %n) {{
entry:
  br label %head
head:
  %i = phi i32 [ 0, %entry ], [ %i1, %body ]
  %more = icmp slt i32 %i, %n
  br i1 %more, label %body, label %done
body:
  call void @llvm.x86.sse2.pause()
  %i1 = add i32 %i, 1
  br label %head
done:
  ret void
}}

define void @hcqrt_reset() {{
  store i32 0, ptr @nworkers
  store i32 0, ptr @done
  store i64 0, ptr @claim
  store i32 0, ptr @caller_sleeping
  store i32 -1, ptr @placed_for
  call void @llvm.memset.p0.i64(ptr @go, i8 0, i64 {4 * MAXW}, i1 false)
  call void @llvm.memset.p0.i64(ptr @sleeping, i8 0, i64 {4 * MAXW}, i1 false)
  call void @llvm.memset.p0.i64(ptr @wtid, i8 0, i64 {4 * MAXW}, i1 false)
  ret void
}}
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

; the most workers a launch wakes (RUNNER_C's hcqrt_set_workers): 0, or -1 when n is out of range (no change)
define i32 @hcqrt_set_workers(i32 %n) {{
entry:
  %neg = icmp slt i32 %n, 0
  %big = icmp sgt i32 %n, {MAXW}
  %bad = or i1 %neg, %big
  br i1 %bad, label %no, label %yes
yes:
  store i32 %n, ptr @maxw
  ret i32 0
no:
  ret i32 -1
}}

; the CPUs workers may be pinned to; n < 2 turns pinning off. 0, or -1 when a CPU number is out of range (no change)
define i32 @hcqrt_set_cpus(ptr %list, i32 %n) {{
entry:
  %neg = icmp slt i32 %n, 0
  %big = icmp sgt i32 %n, {MAXCPU}
  %badn = or i1 %neg, %big
  br i1 %badn, label %bad, label %chk.head
chk.head:
  %i = phi i32 [ 0, %entry ], [ %i1, %chk.body ]
  %more = icmp slt i32 %i, %n
  br i1 %more, label %chk.item, label %copy.head
chk.item:
  %i64 = sext i32 %i to i64
  %p = getelementptr inbounds i64, ptr %list, i64 %i64
  %c = load i64, ptr %p
  %lo = icmp slt i64 %c, 0
  %hi = icmp sge i64 %c, {MAXCPU}
  %out = or i1 %lo, %hi
  br i1 %out, label %bad, label %chk.body
chk.body:
  %i1 = add i32 %i, 1
  br label %chk.head
copy.head:
  %j = phi i32 [ 0, %chk.head ], [ %j1, %copy.body ]
  %cm = icmp slt i32 %j, %n
  br i1 %cm, label %copy.body, label %set
copy.body:
  %j64 = sext i32 %j to i64
  %q = getelementptr inbounds i64, ptr %list, i64 %j64
  %v = load i64, ptr %q
  %v32 = trunc i64 %v to i32
  %d = getelementptr inbounds [{MAXCPU} x i32], ptr @cpus, i64 0, i64 %j64
  store i32 %v32, ptr %d
  %j1 = add i32 %j, 1
  br label %copy.head
set:
  store i32 %n, ptr @ncpus
  store i32 -1, ptr @placed_for
  ret i32 0
bad:
  ret i32 -1
}}
"""
