"""With no ALNAIR_SHM_DIR, segments are POSIX shared-memory objects that posix_ipc opens by name."""

from __future__ import annotations

import mmap

import posix_ipc

from alnair.abi import layout, naming


def test_default_segment_opens_by_posix_shm_name(start_writer):
    writer = start_writer(env={"ALNAIR_SHM_DIR": ""})  # empty means the default
    assert str(writer.path.parent) == naming.DEFAULT_DIR
    shm = posix_ipc.SharedMemory("/" + writer.path.name, flags=0, read_only=True)
    try:
        with mmap.mmap(shm.fd, layout.HEADER_SIZE, prot=mmap.PROT_READ) as view:
            header = layout.ShmHeader.from_buffer_copy(view)
    finally:
        shm.close_fd()
    assert header.magic == layout.SHM_MAGIC and header.writer_pid == writer.pid
