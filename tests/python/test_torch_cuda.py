# SPDX-License-Identifier: MIT
"""ferry.torch.to on a CUDA GPU: byte-exact round trips of random structures and ordering
against work already queued on the target stream. Skipped without a GPU."""
import random

import pytest

import ferry

torch = pytest.importorskip("torch")
import ferry.torch as ft  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not ferry.Device.built_with(
        ferry.Backend.hip if getattr(torch.version, "hip", None) else ferry.Backend.cuda),
    reason="needs a CUDA/HIP GPU and ferry built with its backend")

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool, torch.complex64]


def random_tensor(rng: random.Random, pinned: bool):
    dtype = rng.choice(DTYPES)
    shape = [rng.choice([0, 1, 3, 17, 256, 1000]) for _ in range(rng.randint(0, 3))]
    n = 1
    for s in shape:
        n *= s
    raw = torch.randint(0, 256, (n * torch.empty(0, dtype=dtype).element_size(),), dtype=torch.uint8)
    if dtype == torch.bool:
        raw = raw % 2
    t = raw.view(dtype).view(shape) if shape else raw.view(dtype).view(())
    return t.pin_memory() if pinned and t.numel() else t


def random_structure(rng: random.Random, depth: int = 0):
    kind = rng.choice(["tensor", "tensor", "list", "dict", "tuple"] if depth < 3 else ["tensor"])
    if kind == "tensor":
        return random_tensor(rng, pinned=rng.random() < 0.5)
    n = rng.randint(0, 5)
    items = [random_structure(rng, depth + 1) for _ in range(n)]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    return {f"k{i}": v for i, v in enumerate(items)}


def flat(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in flat(v)]
    return [t for v in obj for t in flat(v)]


def as_bytes(t):
    return t.contiguous().view(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


@pytest.mark.parametrize("seed", range(8))
def test_random_structures_round_trip_byte_for_byte(seed):
    rng = random.Random(seed)
    obj = random_structure(rng)
    r = ft.to(obj, "cuda")
    torch.cuda.current_stream().synchronize()
    src, dst = flat(obj), flat(r)
    assert len(src) == len(dst)
    for s, d in zip(src, dst):
        assert d.device.type == "cuda" and d.dtype == s.dtype and d.shape == s.shape
        assert torch.equal(as_bytes(d).cpu(), as_bytes(s))


def test_the_target_stream_never_reads_stale_data():
    side = torch.cuda.Stream()
    for trial in range(5):
        src = torch.randint(0, 1 << 30, (64 << 20,), dtype=torch.int32)  # 256 MiB, pageable
        with torch.cuda.stream(side):
            d = ft.to(src, "cuda", target_stream=side)
            total = d.sum(dtype=torch.int64)  # enqueued right after the call, on the target stream
        side.synchronize()
        assert int(total) == int(src.sum(dtype=torch.int64)), trial


def test_a_reused_block_is_not_overwritten_while_earlier_work_reads_it():
    # The next call's destination is the block of a result dropped while the target stream
    # still has to read it: the copy must wait for that read.
    stream = torch.cuda.Stream()
    n = 32 << 20
    ones = torch.full((n,), 1, dtype=torch.uint8).pin_memory()
    twos = torch.full((n,), 2, dtype=torch.uint8).pin_memory()
    with torch.cuda.stream(stream):
        a = ft.to(ones, "cuda", target_stream=stream)
        address = a.data_ptr()
        torch.cuda._sleep(500_000_000)  # keeps the stream busy before the read below
        total = a.sum(dtype=torch.int64)  # reads `a` after the sleep
        del a                           # released in the stream's order
        b = ft.to(twos, "cuda", target_stream=stream)
    assert b.data_ptr() == address, "the block was not reused; the test saw nothing"
    stream.synchronize()
    assert int(total) == n               # the read saw the old bytes
    assert int(b.sum(dtype=torch.int64)) == 2 * n


def test_the_copy_overlaps_the_compute_queued_on_the_target():
    # The destination is a block whose free point ferry knows, so the copy does not wait for the
    # target stream's compute queued before the call.
    stream = torch.cuda.Stream()
    pinned = torch.arange(1 << 20, dtype=torch.float32).pin_memory()
    pageable = torch.arange(1000, dtype=torch.int64)
    with torch.cuda.stream(stream):
        warm = ft.to({"a": pinned, "b": pageable}, "cuda", target_stream=stream)
        del warm
        torch.cuda._sleep(400_000_000)  # compute queued before the call
        r = ft.to({"a": pinned, "b": pageable}, "cuda", target_stream=stream)
        ft.synchronize()                # every ferry copy done ...
        busy = not stream.query()       # ... while the target stream still computes
    stream.synchronize()
    assert busy
    assert torch.equal(r["a"].cpu(), pinned) and torch.equal(r["b"].cpu(), pageable)


def test_pytorch_running_out_of_memory_takes_the_idle_destinations():
    # ferry.torch draws its destinations from PyTorch's caching allocator: once dropped they
    # are PyTorch's cached memory, which an allocation that would otherwise fail takes back.
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    chunk = 1 << 30
    src = torch.full((chunk,), 5, dtype=torch.uint8).pin_memory()
    results = []
    while len(results) * chunk < free - 8 * chunk:
        results.append(ft.to(src, "cuda"))
    filled = len(results) * chunk
    assert int(results[-1][:4096].sum()) == 5 * 4096
    del results
    ft.synchronize()
    torch.cuda.synchronize()
    assert torch.cuda.memory_reserved() >= filled, "the destinations were not left in PyTorch's cache"
    big = torch.empty(free - 4 * chunk, dtype=torch.uint8, device="cuda")  # needs the cached memory
    big.fill_(1)
    torch.cuda.synchronize()
    del big
    torch.cuda.empty_cache()


def test_default_target_is_the_current_stream_and_the_host_is_not_synchronized():
    src = torch.ones(16 << 20, dtype=torch.float32)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)
        d = ft.to(src, "cuda")
        busy = not s.query()  # the call returned while the stream still sleeps
        total = d.sum()
    s.synchronize()
    assert busy
    assert float(total) == src.numel()


def test_the_default_stream_as_target_is_not_synchronized_on_the_host():
    # PyTorch's default stream has handle 0, which DLPack calls 1 (the legacy default stream):
    # ferry orders it on the device, so the call returns while it still sleeps.
    src = torch.ones(16 << 20, dtype=torch.float32)
    main = torch.cuda.default_stream()
    with torch.cuda.stream(main):
        torch.cuda._sleep(200_000_000)
        d = ft.to(src, "cuda")
        busy = not main.query()
        total = d.sum()
    main.synchronize()
    assert busy
    assert float(total) == src.numel()


def test_dlpack_export_to_the_default_stream_waits_on_the_device():
    dev, xfer = ft.engine(ferry.Backend.cuda, torch.cuda.current_device())
    q = dev.queue(ferry.QueueRole.compute)
    src = torch.arange(1 << 20, dtype=torch.int32)
    up = xfer.upload(memoryview(src.numpy()), q)
    main = torch.cuda.default_stream()
    with torch.cuda.stream(main):
        torch.cuda._sleep(200_000_000)
        t = torch.from_dlpack(up.buffer).view(torch.int32)  # torch passes stream=1
        busy = not main.query()
        total = t.sum(dtype=torch.int64)
    main.synchronize()
    assert busy
    assert int(total) == int(src.sum(dtype=torch.int64))


def test_adopt_queue_accepts_a_torch_stream():
    dev, _ = ft.engine(ferry.Backend.hip if getattr(torch.version, "hip", None) else ferry.Backend.cuda,
                       torch.cuda.current_device())
    s = torch.cuda.Stream()
    q = dev.adopt_queue(s)
    assert q == dev.adopt_queue(s.cuda_stream)
    assert q.role == ferry.QueueRole.compute


def test_dlpack_to_torch_orders_the_consumer_stream():
    dev, xfer = ft.engine(ferry.Backend.cuda, torch.cuda.current_device())
    q = dev.queue(ferry.QueueRole.compute)
    src = torch.arange(1 << 24, dtype=torch.int32)
    up = xfer.upload(memoryview(src.numpy()), q)
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        t = torch.from_dlpack(up.buffer).view(torch.int32)
        total = t.sum(dtype=torch.int64)
    consumer.synchronize()
    assert int(total) == int(src.sum(dtype=torch.int64))


def test_pinned_sources_are_copied_directly_and_held_until_their_copy_completes():
    # The copy waits behind ~0.2 s of work on the target stream, so it is still ahead when the
    # caller drops the source; a pinned block freed then would be handed to the next
    # pin_memory() and overwritten before the DMA read it.
    s = torch.cuda.Stream()
    src = torch.arange(1 << 22, dtype=torch.int32).pin_memory()
    pageable = torch.arange(1000, dtype=torch.int16)
    want = src.clone()
    with torch.cuda.stream(s):
        torch.cuda._sleep(400_000_000)
        r = ft.to({"pinned": src, "pageable": pageable}, "cuda", target_stream=s)
    del src
    assert ft.held_sources() >= 1
    junk = torch.empty(1 << 22, dtype=torch.int32).pin_memory()
    junk.fill_(-1)
    s.synchronize()
    assert torch.equal(r["pinned"].cpu(), want)
    assert torch.equal(r["pageable"].cpu(), pageable)
    ft.synchronize()
    assert ft.held_sources() == 0


def test_pinned_sources_at_one_address_are_copied_by_their_own_length():
    # Views of one pinned storage start at its first byte: each call copies its own view,
    # whatever length an earlier call from that address copied.
    base = torch.arange(1 << 20, dtype=torch.int32).pin_memory()
    for n in (1 << 18, 1 << 20, 1 << 19):
        assert base[:n].nbytes >= ft.DMA_MIN_BYTES
        r = ft.to(base[:n], "cuda")
        assert r.shape == (n,) and torch.equal(r.cpu(), base[:n])
    # A block pinned again after its storage died may sit at the same address: its own bytes
    # are copied.
    del base, r
    again = torch.full((1 << 20,), 7, dtype=torch.int32).pin_memory()
    assert torch.equal(ft.to(again, "cuda").cpu(), again)


def test_small_pinned_sources_are_staged_and_may_change_once_the_call_returns():
    ft.synchronize()
    s = torch.cuda.Stream()
    small = torch.arange(1000, dtype=torch.int32).pin_memory()
    assert small.nbytes < ft.DMA_MIN_BYTES
    want = small.clone()
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # a DMA from `small` would run after the fill below
        r = ft.to(small, "cuda", target_stream=s)
    assert ft.held_sources() == 0
    small.fill_(-1)
    s.synchronize()
    assert torch.equal(r.cpu(), want)


def test_pinned_memory_of_another_kind_is_refused_by_the_core():
    dev, _ = ft.engine(ferry.Backend.hip if getattr(torch.version, "hip", None) else ferry.Backend.cuda)
    pageable = torch.arange(4096, dtype=torch.uint8)
    with pytest.raises(ferry.Error) as e:
        dev.host_pool.adopt(pageable.data_ptr(), pageable.nbytes)
    assert e.value.code == "invalid_argument" and "page-locked" in str(e.value)
    pinned = torch.arange(4096, dtype=torch.uint8).pin_memory()
    h = dev.host_pool.adopt(pinned.data_ptr(), pinned.nbytes)
    assert h.adopted


def test_repeated_calls_adopt_each_target_stream_once():
    x = torch.arange(4096, dtype=torch.float32)
    side = torch.cuda.Stream()
    ft.to(x, "cuda")
    ft.to(x, "cuda", target_stream=side)
    dev, _ = ft.engine(ferry.Backend.cuda, torch.cuda.current_device())
    adopted = len(dev.pool.budget().queues)
    for _ in range(20):
        y = ft.to(x, "cuda")  # the current stream: a new Stream object each call
        z = ft.to(x, "cuda", target_stream=side)
    assert len(dev.pool.budget().queues) == adopted
    torch.cuda.synchronize()
    assert torch.equal(y.cpu(), x) and torch.equal(z.cpu(), x)


# The seed's order: the call under `with side:` with target_stream=main, then compute on main,
# then main.wait_stream(side), then the use. The wait goes to the stream current at the call.
SEED_BYTES = 1 << 30  # a copy long enough (about 20 ms) that its completion cannot be missed


def test_under_a_side_stream_the_side_waits_and_the_target_does_not():
    main, side = torch.cuda.Stream(), torch.cuda.Stream()
    src = torch.randint(0, 1 << 30, (SEED_BYTES // 4,), dtype=torch.int32).pin_memory()
    with torch.cuda.stream(side):
        d = ft.to(src, "cuda", target_stream=main)
    compute = torch.cuda.Event()
    compute.record(main)   # main's work enqueued after the call: not held behind the copy
    compute.synchronize()
    copying = not side.query()  # the side stream still waits for the copy
    main.wait_stream(side)
    with torch.cuda.stream(main):
        total = d.sum(dtype=torch.int64)
    main.synchronize()
    assert copying, "the target stream waited for the copy at the call"
    assert int(total) == int(src.sum(dtype=torch.int64))
    assert d.data_ptr() != 0


def test_an_explicit_wait_stream_is_the_one_that_waits():
    main, side = torch.cuda.Stream(), torch.cuda.Stream()
    src = torch.randint(0, 1 << 30, (SEED_BYTES // 4,), dtype=torch.int32).pin_memory()
    with torch.cuda.stream(side):
        d = ft.to(src, "cuda", target_stream=main, wait_stream=main)
    assert side.query()  # nothing was enqueued on the current stream
    with torch.cuda.stream(main):
        total = d.sum(dtype=torch.int64)  # ordered by main's own wait, no wait_stream
    main.synchronize()
    assert int(total) == int(src.sum(dtype=torch.int64))


@pytest.mark.parametrize("source", ["pinned", "pageable"])
def test_a_result_dropped_at_once_is_never_reused_under_its_copy(source):
    # Dropped before anyone waits, the block is freed in main's order at once: main's next
    # allocation must not get it while the copy still writes it.
    main, side = torch.cuda.Stream(), torch.cuda.Stream()
    n = 256 << 20
    src = torch.full((n,), 3, dtype=torch.uint8)
    if source == "pinned":
        src = src.pin_memory()
    for trial in range(4):
        with torch.cuda.stream(side):
            d = ft.to(src, "cuda", target_stream=main)
        del d
        with torch.cuda.stream(main):
            x = torch.empty(n, dtype=torch.uint8, device="cuda")
            x.fill_(7)
        torch.cuda.synchronize()  # the copy too: a late write into x shows below
        wrong = int((x != 7).sum())
        assert wrong == 0, f"trial {trial}: {wrong} bytes of main's new tensor were overwritten by the copy"
        del x


def test_stash_and_restore_keep_identity_views_and_bytes():
    main = torch.cuda.current_stream()
    base = torch.randn(1 << 20, device="cuda")
    view = base[1000:3000].view(40, 50)
    param = torch.nn.Parameter(torch.randn(333, 7, device="cuda", dtype=torch.float16))
    state = torch.randint(0, 1 << 30, (12345,), device="cuda", dtype=torch.int64)
    expect = [t.detach().cpu().clone() for t in (base, view, param, state)]
    ids = [id(t) for t in (base, view, param, state)]
    s = ft.stash([base, view, param, state])
    assert s.state == "stashed" and s.nbytes >= base.nbytes + param.nbytes + state.nbytes
    for t in (base, view, param, state):
        assert t.device.type == "cpu"
    assert isinstance(param, torch.nn.Parameter)
    with pytest.raises(RuntimeError):
        torch.ones(4, device="cuda") + state[:4]  # a device read of a stashed tensor fails loudly
    s.synchronize()
    for t, e in zip((base, view, param, state), expect):
        assert torch.equal(t.detach(), e)
    assert view.data_ptr() - base.data_ptr() == 1000 * 4
    s.restore()
    assert s.state == "restoring"
    s.wait(main)
    assert s.state == "restored"
    assert [id(t) for t in (base, view, param, state)] == ids
    for t, e in zip((base, view, param, state), expect):
        assert t.device.type == "cuda" and torch.equal(t.detach().cpu(), e)
    assert view.data_ptr() - base.data_ptr() == 1000 * 4
    view.fill_(7)  # still a view of base
    assert int((base[1000:3000] == 7).sum()) == 2000


@pytest.mark.parametrize("free", ["ordered", "deferred"])
def test_stash_frees_at_once_and_nothing_written_after_it_reaches_the_copy(free):
    # The stash frees the storage at once: main's next allocation of the same size may get the
    # same block and write it immediately. The host copy and the restore must hold the stashed
    # bytes all the same.
    n = 64 << 20
    tensors = [torch.full((n,), i + 1, dtype=torch.uint8, device="cuda") for i in range(8)]
    torch.cuda.synchronize()
    for step in range(4):
        torch.cuda._sleep(50_000_000)  # queued work before the stash, as in a real step
        s = ft.stash(tensors, free=free)
        scratch = [torch.full((n,), 0xEE, dtype=torch.uint8, device="cuda") for _ in tensors]
        s.synchronize()
        bad = [i for i, t in enumerate(tensors) if int((t != i + 1).sum())]
        assert bad == [], f"step {step}: host copies {bad} hold bytes written after the stash freed them"
        del scratch
        s.restore()
        s.wait()
        bad = [i for i, t in enumerate(tensors) if int((t != i + 1).sum())]
        assert bad == [], f"step {step}: restored tensors {bad} are corrupt"


def test_stash_free_order_decides_whether_the_stream_waits_for_the_copy():
    # "ordered": main waits for the D2H on the device, so work enqueued on main after the call
    # completes after the copy. "deferred": main does not wait, so that work completes while the
    # copy (1 GiB, tens of milliseconds) still runs, and the block is not reused under it.
    n = 1 << 30
    for free in ("ordered", "deferred"):
        state = torch.full((n,), 5, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        s = ft.stash([state], free=free)
        after = torch.cuda.Event()
        after.record()
        after.synchronize()
        if free == "ordered":
            assert s.ready.reached(), "ordered: main's work after the stash completed before the copy"
        else:
            assert not s.ready.reached(), "deferred: main's work after the stash waited for the copy"
            taken = torch.full((n,), 0xEE, dtype=torch.uint8, device="cuda")  # may not take the block yet
            s.synchronize()
            assert int((state != 5).sum()) == 0, "deferred: the copy read bytes written after the stash"
            del taken
        s.restore()
        s.wait()
        assert int((state != 5).sum()) == 0
        del state, s
        torch.cuda.empty_cache()


@pytest.mark.parametrize("free", ["ordered", "deferred"])
def test_a_stash_right_after_a_restore_reads_the_restored_bytes(free):
    # Stashes and restores run on different transfer streams: a stash of tensors whose restore
    # no stream waited for yet must still read them after the restore has written them.
    n = 128 << 20
    tensors = [torch.full((n,), i + 1, dtype=torch.uint8, device="cuda") for i in range(8)]
    for step in range(3):
        s = ft.stash(tensors, free=free)
        scratch = [torch.full((n,), 0xEE, dtype=torch.uint8, device="cuda") for _ in tensors]
        del scratch  # the restore's blocks hold other bytes until its copy writes them
        s.restore()  # no wait: the next stash orders itself after the restore
        again = ft.stash(tensors, free=free)
        again.synchronize()
        bad = [i for i, t in enumerate(tensors) if int((t != i + 1).sum())]
        assert bad == [], f"step {step}: the stash after a restore read {bad} before the restore wrote them"
        del s
        again.restore()
        again.wait()


@pytest.mark.parametrize("free", ["ordered", "deferred"])
def test_holders_that_were_not_passed_follow_the_storage_through_a_restore(free):
    # A view, a .data alias and an autograd saved tensor that were not passed hold the same
    # storage object as the stashed tensor: the stash lets go of its memory (they see an empty
    # storage meanwhile, as after resize_(0)) and the restore gives it memory with the bytes
    # back, so each of them reads and writes the state again.
    main = torch.cuda.current_stream()
    w = torch.nn.Parameter(torch.arange(1 << 16, dtype=torch.float32, device="cuda"))
    view = w.data[100:300].view(20, 10)
    alias = w.data
    y = (w * w).sum()  # saves w for the backward
    storage_id = alias.untyped_storage()._cdata
    s = ft.stash([w], free=free)
    assert w.device.type == "cpu"
    assert alias.untyped_storage().nbytes() == 0 and view.untyped_storage().nbytes() == 0
    assert alias.untyped_storage()._cdata == storage_id
    with pytest.raises(ferry.Error) as e:
        ft.stash([view])  # a view of a stashed storage
    assert e.value.code == "invalid_argument" and "stashed" in e.value.message
    s.restore()
    s.wait(main)
    assert w.device.type == "cuda" and w.untyped_storage()._cdata == storage_id
    expect = torch.arange(1 << 16, dtype=torch.float32)
    assert torch.equal(alias.cpu(), expect) and torch.equal(view.cpu(), expect[100:300].view(20, 10))
    view.fill_(-1)
    assert int((w.detach()[100:300] == -1).sum()) == 200  # one storage again
    y.backward()
    grad = 2 * alias.detach().clone()
    assert torch.equal(w.grad, grad)


def test_stash_takes_storages_whose_python_object_was_asked_for():
    # Once code asked a tensor for its untyped_storage(), PyTorch may keep that Python object
    # with the storage, holding it: the stash must not count it as a holder left out, or it
    # refuses every tensor whose storage anything (a checkpoint, a stash of PyTorch's) looked at.
    state = [torch.full((1 << 20,), i + 1, dtype=torch.uint8, device="cuda") for i in range(3)]
    for t in state:
        assert t.untyped_storage().nbytes() == 1 << 20
    s = ft.stash(state)
    s.restore()
    s.wait()
    bad = [i for i, t in enumerate(state) if int((t != i + 1).sum())]
    assert bad == []


def test_a_stash_reuses_a_restored_host_copy_after_the_restore_read_it():
    # The host copy of a restored stash goes back to ferry with the point at which the restore
    # read it; the next stash of that size writes into it after that point, on the device, so
    # a host running ahead of the GPU needs no new pinned memory per step. Here A's restore is
    # held back on the device (it follows main's queued work) and B's stash, on main, would
    # otherwise overwrite A's host copy while A's restore still reads it.
    n = 64 << 20
    a = [torch.full((n,), 3, dtype=torch.uint8, device="cuda")]
    b = [torch.full((n,), 9, dtype=torch.uint8, device="cuda")]
    side = torch.cuda.Stream()
    sa = ft.stash(a)
    host = a[0].data_ptr()  # a CPU tensor over the host copy while stashed
    sa.synchronize()
    torch.cuda._sleep(100_000_000)  # main is busy: A's restore copy starts after it
    sa.restore()
    sa.wait(side)
    sb = ft.stash(b)
    assert b[0].data_ptr() == host, "the stash did not reuse the restored stash's host copy"
    torch.cuda.synchronize()
    assert int((a[0] != 3).sum()) == 0, "the reused host copy was overwritten under the restore's read"
    sb.restore()
    sb.wait()
    assert int((b[0] != 9).sum()) == 0
    sc = ft.stash(a)
    kept = a[0][:16]  # a CPU view of the host copy, not passed, kept past the restore
    sc.restore()
    sc.wait()
    sd = ft.stash(b)
    assert b[0].data_ptr() != kept.data_ptr(), "a host copy still held elsewhere was reused"
    assert int((kept != 3).sum()) == 0
    sd.restore()
    sd.wait()


def test_small_leaves_of_a_per_leaf_call_never_wait_behind_its_bulk_copies():
    # Where the target does not wait, each leaf has its own block. The leaves too small for
    # DMA must still go in one staged call: one staged call per small leaf takes a buffer of
    # the staging ring each, and once the ring wraps the host waits for the DMA of the first
    # lap, queued behind the call's bulk copy.
    from ferry.torch._engine import gpu_backend
    main, side = torch.cuda.Stream(), torch.cuda.Stream()
    dev_index = torch.cuda.current_device()
    bulk = torch.ones(256 << 20, dtype=torch.uint8).pin_memory()
    small = [torch.full((1000 + i,), i, dtype=torch.int32).pin_memory() for i in range(12)]
    ft.to([bulk] + small, "cuda", target_stream=main, wait_stream=side)  # set up the engine
    torch.cuda.synchronize()
    device = ft.engine(gpu_backend(), dev_index)[0]
    before = device.host_waits
    out = ft.to([bulk] + small, "cuda", target_stream=main, wait_stream=side)
    waits = device.host_waits - before
    main.wait_stream(side)
    for s, d in zip(small, out[1:]):
        assert torch.equal(d.cpu(), s)
    assert int(out[0].sum(dtype=torch.int64)) == bulk.numel()
    assert waits == 0, f"the call waited on the host {waits} times"
