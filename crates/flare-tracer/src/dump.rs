//! The dump written at exit when no agent collects the rings: the tracer file itself,
//! copied sparsely (header, names, each ring's control block and unconsumed events), so
//! the same reader opens a live ring file and a dump.

use crate::layout::*;
use crate::shm::Mapping;
use crate::TracerError;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

pub(crate) fn write_dump(map: &Mapping, out: &Path) -> Result<(), TracerError> {
    let err = |e| TracerError::io(out, e);
    let geo = map.geometry();
    let tmp = out.with_extension("partial");
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.set_len(geo.file_size() as u64).map_err(err)?;
    // SAFETY: the header page and the published part of the name table are plain bytes.
    let used = map.header().names_used.load(Ordering::Acquire) as usize;
    let head = unsafe { std::slice::from_raw_parts(map.header() as *const _ as *const u8, PAGE) };
    f.write_all(head).map_err(err)?;
    let names = unsafe { std::slice::from_raw_parts(map.names_ptr(), used) };
    f.write_all(names).map_err(err)?;
    for i in 0..geo.max_rings {
        let r = map.ring(i);
        if r.header.owner.load(Ordering::Acquire) == RING_FREE {
            continue;
        }
        let off = geo.rings_offset() + i as usize * geo.ring_stride();
        f.seek(SeekFrom::Start(off as u64)).map_err(err)?;
        // SAFETY: the control block is plain data read racily by design (a best-effort
        // snapshot at exit); slots are read below through the ring protocol.
        let hdr = unsafe {
            std::slice::from_raw_parts(r.header as *const _ as *const u8, RING_HEADER_SIZE)
        };
        f.write_all(hdr).map_err(err)?;
        // The slots as they are: the header's head/tail say which ones are unconsumed.
        let slots = r.slots_bytes();
        f.write_all(slots).map_err(err)?;
    }
    f.sync_all().map_err(err)?;
    drop(f);
    std::fs::rename(&tmp, out).map_err(err)
}
