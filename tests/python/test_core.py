# SPDX-License-Identifier: MIT
"""The core API of the ferry package end to end on the host backend."""
import ctypes
import inspect

import pytest

import ferry

np = pytest.importorskip("numpy")


@pytest.fixture
def dev():
    d = ferry.Device.open(ferry.Backend.host, host_latency_us=50)
    yield d
    d.close()


def here() -> int:
    """The line of the caller."""
    return inspect.currentframe().f_back.f_lineno


def test_device_reports_its_backend_and_capabilities(dev):
    assert dev.backend == ferry.Backend.host
    assert dev.capabilities.backend == ferry.Backend.host
    assert not dev.capabilities.is_gpu
    assert ferry.Device.built_with(ferry.Backend.host)
    assert ferry.Device.count(ferry.Backend.host) >= 1
    assert dev.queue(ferry.QueueRole.compute).role == ferry.QueueRole.compute
    assert dev.queue(ferry.QueueRole.transfer).role == ferry.QueueRole.transfer
    assert ferry.parse_backend("host") == ferry.Backend.host


def test_pageable_upload_and_download_round_trip(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    src = np.random.default_rng(1).integers(0, 255, 3 << 20, dtype=np.uint8)
    up = xfer.upload(src, q)
    assert up.buffer.size == src.nbytes
    back = np.zeros_like(src)
    xfer.download(up.buffer, back)
    assert np.array_equal(back, src)
    up.buffer.release()


def test_pageable_sources_go_through_a_bounded_staging_ring(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev, staging_chunk_bytes=1 << 20, staging_chunks=2)
    src = np.arange(9 << 18, dtype=np.uint32)  # 9 MiB: many trips through a 2 MiB ring
    up = xfer.upload(memoryview(src), q)
    back = np.empty_like(src)
    xfer.download(up.buffer, back)
    assert np.array_equal(back, src)
    assert dev.host_pool.pinned_bytes <= 2 << 20


def test_staging_disabled_refuses_pageable_sources_but_takes_pinned_ones(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev, staging=False)
    with pytest.raises(ferry.Error) as e:
        xfer.upload(b"x" * 100, q)
    assert e.value.code == "invalid_argument"
    h = dev.host_pool.allocate(100)
    memoryview(h)[:] = bytes(range(100))
    up = xfer.upload(h, q)
    out = dev.host_pool.allocate(100)
    xfer.download(up.buffer, out).wait()
    assert bytes(memoryview(out)) == bytes(range(100))


def test_adopted_host_memory_is_copied_directly_in_both_directions(dev):
    # numpy memory stands for an engine's page-locked memory: the host backend adopts any.
    assert dev.capabilities.host_memory_adoption
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev, staging=False)  # a staged copy would fail: every copy is DMA
    src = np.random.default_rng(7).integers(0, 255, 1 << 20, dtype=np.uint8)
    dst = np.zeros(1 << 20, dtype=np.uint8)
    pinned = dev.host_pool.pinned_bytes
    h = dev.host_pool.adopt(src.ctypes.data, src.nbytes)
    out = dev.host_pool.adopt(dst.ctypes.data, dst.nbytes)
    assert h.adopted and not h.registered and h.size == src.nbytes and h.address == src.ctypes.data
    assert dev.host_pool.pinned_bytes == pinned  # ferry pinned none of it
    up = xfer.upload(h, q)
    xfer.download(up.buffer, out).wait()
    assert np.array_equal(dst, src)
    # One destination filled from two adopted ranges at offsets; the other bytes are kept.
    d = dev.pool.allocate(4096, q)
    xfer.upload_into(dev.host_pool.adopt(dst.ctypes.data, 4096), d)
    xfer.upload_into(dev.host_pool.adopt(src.ctypes.data + 100, 50), d, 1000)
    p = xfer.upload_into(dev.host_pool.adopt(src.ctypes.data + 500, 8), d, 4088)
    p.wait()
    back = np.zeros(4096, dtype=np.uint8)
    xfer.download(d, dev.host_pool.adopt(back.ctypes.data, back.nbytes)).wait()
    want = src[:4096].copy()
    want[1000:1050] = src[100:150]
    want[4088:] = src[500:508]
    assert np.array_equal(back, want)
    up.buffer.release()
    d.release()


def test_adopt_refuses_bad_input_naming_it_and_the_callers_line(dev):
    a = np.zeros(64, dtype=np.uint8)
    with pytest.raises(ferry.Error) as e:
        line = here(); dev.host_pool.adopt(0, 64)  # noqa: E702
    assert (e.value.code, e.value.lineno) == ("invalid_argument", line)
    assert "HostPool::adopt" in str(e.value) and "null" in str(e.value)
    with pytest.raises(ferry.Error) as e:
        dev.host_pool.adopt(a.ctypes.data, 0)
    assert e.value.code == "invalid_argument" and "size 0" in str(e.value)
    with pytest.raises(ferry.Error) as e:
        dev.host_pool.adopt((1 << 64) - 16, 64)
    assert e.value.code == "invalid_argument" and "wraps" in str(e.value)
    xfer = ferry.Transfer(dev)
    d = dev.pool.allocate(64, dev.queue(ferry.QueueRole.compute))
    with pytest.raises(ferry.Error) as e:
        xfer.upload_into(dev.host_pool.adopt(a.ctypes.data, 64), d, 1)  # past the destination's end
    assert e.value.code == "invalid_argument" and "destination" in str(e.value)


def test_batch_upload_with_empty_inputs_and_batch_download(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    srcs = [np.arange(n, dtype=np.int64) for n in (5, 0, 1000, 0, 3)]
    batch = xfer.upload_batch(srcs, q)
    assert batch.sizes == [s.nbytes for s in srcs]
    assert all(o % 256 == 0 for o in batch.offsets)
    outs = [np.full_like(s, -1) for s in srcs]
    xfer.download_batch(batch, outs)
    for s, o in zip(srcs, outs):
        assert np.array_equal(s, o)
    views = batch.views
    assert [v.size for v in views] == batch.sizes
    assert np.array_equal(np.from_dlpack(views[2]).view(np.int64), srcs[2])
    assert np.from_dlpack(views[1]).size == 0


def test_upload_into_adopted_memory_keeps_the_bytes_outside_the_views(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    dst = np.full(4096, 7, dtype=np.uint8)
    adopted = dev.adopt_memory(dst.ctypes.data, dst.nbytes, q, tag="numpy")
    assert adopted.adopted
    before = dev.pool.budget().reserved_bytes
    xfer.upload_into([b"\x01" * 100, b"\x02" * 50], adopted, [0, 1000]).wait()
    adopted.release().wait()
    assert dev.pool.budget().reserved_bytes == before  # adopted memory is not pool memory
    assert (dst[:100] == 1).all() and (dst[1000:1050] == 2).all()
    assert (dst[100:1000] == 7).all() and (dst[1050:] == 7).all()


def test_adopted_memory_keeps_its_owner_until_the_release_and_every_export_are_gone(dev):
    # `keep` holds the object that owns the memory: it must outlive the handle and every
    # DLPack export, so that its allocator frees the memory only after ferry's release.
    import gc
    import weakref

    class Owner:
        def __init__(self, n):
            self.array = np.zeros(n, dtype=np.uint8)

    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    owner = Owner(4096)
    alive = weakref.ref(owner)
    adopted = dev.adopt_memory(owner.array.ctypes.data, 4096, q, keep=owner)
    xfer.upload_into([b"\x05" * 4096], adopted, [0]).wait()
    view = np.from_dlpack(adopted)
    del owner, adopted
    gc.collect()
    assert alive() is not None, "the owner was dropped while an export still used its memory"
    assert (view == 5).all()
    del view
    gc.collect()
    assert alive() is None, "the owner outlived the buffer and its exports"
    # Without `keep` nothing is held.
    other = Owner(64)
    held = weakref.ref(other)
    dev.adopt_memory(other.array.ctypes.data, 64, q).release()
    del other
    gc.collect()
    assert held() is None


def test_adopted_memory_reports_its_release_point_once_every_owner_is_gone(dev):
    # `on_release` gets the release point once the handle and every export are gone, before
    # `keep` is dropped: an engine that reuses the memory on another queue waits for it.
    import gc

    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    memory = np.zeros(4096, dtype=np.uint8)
    calls = []

    class Keep:
        def __del__(self):
            calls.append("keep dropped")

    adopted = dev.adopt_memory(memory.ctypes.data, 4096, q, keep=Keep(),
                               on_release=lambda point: calls.append(point))
    xfer.upload_into([b"\x09" * 4096], adopted, [0], owner_waits=False)
    view = np.from_dlpack(adopted)
    del adopted
    gc.collect()
    assert calls == [], "on_release ran while an export still used the memory"
    assert (view == 9).all()
    del view
    gc.collect()
    assert len(calls) == 2 and calls[1] == "keep dropped", calls
    point = calls[0]
    assert isinstance(point, ferry.TimelinePoint) and not point.empty
    point.wait()
    assert (memory == 9).all()
    # An explicit release reports the point it returned.
    calls.clear()
    other = dev.adopt_memory(memory.ctypes.data, 64, q, on_release=lambda point: calls.append(point))
    released = other.release()
    assert calls == []
    del other
    gc.collect()
    assert len(calls) == 1 and calls[0].value == released.value
    with pytest.raises(ferry.Error) as e:
        dev.adopt_memory(memory.ctypes.data, 64, q, on_release=42)
    assert e.value.code == "invalid_argument" and "on_release" in e.value.message


def test_batched_adopted_downloads_and_uploads_move_every_range_and_release_them(dev):
    # ferry.torch's stash path (its glue, which needs no torch): many engine ranges adopted,
    # copied to or from one HostBuffer and released by one call each way.
    glue = ferry._ferry._torch
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    rng = np.random.default_rng(7)
    sizes = [4096, 0, 100, 65536]
    ranges = [rng.integers(0, 255, max(n, 1), dtype=np.uint8) for n in sizes]
    offsets = [0, 4096, 4096, 4352]
    host = dev.host_pool.allocate(4352 + 65536)
    host_bytes = np.frombuffer(host, dtype=np.uint8)
    host_bytes[:] = 0
    ready = glue.download_adopted(xfer, [r.ctypes.data for r in ranges], sizes, q, q.mark(), host, offsets, "t")
    assert not ready.empty
    ready.wait()
    for r, n, o in zip(ranges, sizes, offsets):
        assert np.array_equal(host_bytes[o:o + n], r[:n])
    back = [np.zeros(max(n, 1), dtype=np.uint8) for n in sizes]
    done, adopted = glue.upload_adopted(xfer, [b.ctypes.data for b in back], sizes, q, q.mark(), host, offsets, "t")
    assert len(adopted) == 3  # the empty range is not adopted
    released = adopted.release()
    assert adopted.release().empty  # released once
    released.wait()
    assert done.reached()
    for b, r, n in zip(back, ranges, sizes):
        assert np.array_equal(b[:n], r[:n])
    # Bad arguments name what is wrong; nothing is copied.
    with pytest.raises(ferry.Error) as e:
        glue.download_adopted(xfer, [ranges[0].ctypes.data], [4096, 1], q, q.mark(), host, [0], "t")
    assert e.value.code == "invalid_argument" and "one of each per range" in e.value.message
    with pytest.raises(ferry.Error) as e:
        glue.upload_adopted(xfer, [back[0].ctypes.data], [4096], q, q.mark(), host, [4352 + 65536 - 10], "t")
    assert e.value.code == "invalid_argument" and "range 0" in e.value.message and "outside" in e.value.message
    with pytest.raises(ferry.Error) as e:
        glue.download_adopted(xfer, [0], [64], q, q.mark(), host, [0], "t")
    assert e.value.code == "invalid_argument" and "range 0" in e.value.message


def test_pool_budget_snapshot_and_exports(dev, tmp_path):
    q = dev.queue(ferry.QueueRole.compute)
    b = dev.pool.allocate(1 << 20, q, tag="python")
    budget = dev.pool.budget()
    assert budget.active_bytes >= 1 << 20 and budget.reserved_bytes >= budget.active_bytes
    snap = dev.pool.snapshot()
    assert snap.segment_count >= 1
    assert '"format": "ferry-snapshot"' in snap.to_json()
    snap.write_json(str(tmp_path / "s.json"))
    snap.write_html_report(str(tmp_path / "s.html"))
    assert snap.to_memory_viz_pickle()[:1] == b"\x80"  # a pickle
    b.release()
    q.synchronize()
    dev.pool.validate()
    assert dev.pool.statistics().allocated_blocks == 0


def test_semaphores_order_a_copy_after_a_host_signal(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    sem = dev.create_semaphore(0)
    h = dev.host_pool.allocate(64)
    memoryview(h)[:] = b"a" * 64
    up = xfer.upload(h, q, wait=[sem.at(1)])
    assert not up.ready.reached()
    sem.signal(1)
    up.ready.wait(10.0)
    assert up.ready.reached()


def test_known_reached_reads_what_a_wait_saw_without_asking(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    sem = dev.create_semaphore(0)
    h = dev.host_pool.allocate(64)
    up = xfer.upload(h, q, wait=[sem.at(1)])
    assert not up.ready.known_reached  # the copy waits for the signal below
    assert not sem.at(1).known_reached
    sem.signal(1)
    assert sem.at(1).known_reached     # a host signal takes effect at once
    up.ready.wait(10.0)
    assert up.ready.known_reached      # the wait saw it


def test_errors_carry_the_code_and_the_callers_line(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    with pytest.raises(ferry.Error) as e:
        line = here(); xfer.upload(b"", q)  # noqa: E702
    assert e.value.code == "invalid_argument"
    assert e.value.filename == __file__ and e.value.lineno == line
    assert f"[at {__file__}:{line}]" in str(e.value)
    with pytest.raises(ferry.Error) as e:
        line = here(); dev.pool.allocate(0, q)  # noqa: E702
    assert (e.value.code, e.value.lineno) == ("invalid_argument", line)
    with pytest.raises(ferry.Error) as e:
        ferry.Device.open(ferry.Backend.host, ordinal=99)
    assert e.value.code == "invalid_argument"
    with pytest.raises(ferry.Error) as e:
        line = here(); xfer.upload(12345, q)  # noqa: E702
    assert (e.value.code, e.value.lineno) == ("invalid_argument", line)
    with pytest.raises(ferry.Error) as e:
        dev.queue(ferry.QueueRole.compute).synchronize(timeout=-1.0)
    assert e.value.code == "invalid_argument"


def test_a_closed_device_refuses_calls(dev):
    q = dev.queue(ferry.QueueRole.compute)
    dev.close()
    assert not dev.is_open
    with pytest.raises(ferry.Error) as e:
        q.mark()
    assert e.value.code == "invalid_argument"


def capsule_name(capsule) -> bytes:
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(capsule)


def test_dlpack_exports_a_device_buffer_to_numpy_in_place(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    src = np.arange(4096, dtype=np.float32)
    up = xfer.upload(src, q)
    assert up.buffer.__dlpack_device__() == (1, 0)  # kDLCPU
    x = np.from_dlpack(up.buffer)
    assert x.dtype == np.uint8 and x.size == src.nbytes
    assert np.array_equal(x.view(np.float32), src)
    assert x.ctypes.data == up.buffer.address  # in place, no copy
    assert capsule_name(up.buffer.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert capsule_name(up.buffer.__dlpack__()) == b"dltensor"


def test_dlpack_export_keeps_the_buffer_until_the_consumer_drops_it(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev)
    up = xfer.upload(np.ones(1 << 16, dtype=np.uint8), q)
    x = np.from_dlpack(up.buffer)
    with pytest.raises(ferry.Error) as e:
        up.buffer.release()
    assert e.value.code == "invalid_argument" and "DLPack" in e.value.message
    active = dev.pool.budget().active_bytes
    del up
    assert dev.pool.budget().active_bytes == active  # numpy still holds it
    assert int(x.sum()) == 1 << 16
    del x
    q.synchronize()
    assert dev.pool.budget().active_bytes == active - (1 << 16)  # released, stream-ordered


def test_the_type_stub_names_every_binding():
    import os
    import re
    stub = open(os.path.join(os.path.dirname(ferry.__file__), "_ferry.pyi")).read()
    # A name is declared where it starts a line (a module constant) or follows a space (def,
    # class, an attribute).
    missing = [n for n in dir(ferry._ferry)
               if not n.startswith("__") and not re.search(rf"(^|\s){re.escape(n)}\b", stub, re.M)]
    assert missing == []


def test_an_urgent_upload_completes_while_a_long_bulk_upload_is_pending(dev):
    q = dev.queue(ferry.QueueRole.compute)
    xfer = ferry.Transfer(dev, bulk_piece_bytes=1 << 20)
    assert dev.capabilities.copy_priorities
    assert xfer.bulk_piece_bytes == 1 << 20
    assert xfer.urgent_executor != xfer.executor
    big = dev.host_pool.allocate(64 << 20)
    np.frombuffer(big, dtype=np.uint8)[:] = 7
    small = np.arange(1 << 16, dtype=np.uint8)
    bulk = xfer.upload(big, q, owner_waits=False)
    urgent = xfer.upload(small, q, owner_waits=False, priority=ferry.Priority.urgent)
    urgent.ready.wait()
    assert not bulk.ready.reached(), "the urgent upload waited for the 64 MiB bulk upload queued before it"
    back = np.zeros_like(small)
    xfer.download(urgent.buffer, back, priority=ferry.Priority.urgent)
    assert np.array_equal(back, small)
    whole = np.zeros(64 << 20, dtype=np.uint8)
    xfer.download(bulk.buffer, whole)
    assert int(whole.min()) == 7 and int(whole.max()) == 7
    assert ferry.Transfer(dev).bulk_piece_bytes == 1 << 20  # derived from the host's 10 GB/s
    with pytest.raises(ferry.Error) as e:
        ferry.Transfer(dev, bulk_piece_bytes=4096)
    assert e.value.code == "invalid_argument" and "bulk_piece_bytes" in e.value.message
    with pytest.raises(TypeError):
        xfer.upload(small, q, priority=3)
