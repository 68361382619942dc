//! A shared mapping of one tracer file, with typed access to its header, name table and
//! rings. Used by the producer (which creates the file) and the consumer (which opens it).

use crate::layout::*;
use crate::TracerError;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    path: PathBuf,
    _file: File,
}

// The mapping is shared memory accessed through atomics and through plain reads of
// slots the protocol hands over; moving the handle between threads is sound.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from a successful mmap and are unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

fn map_file(file: &File, len: usize, path: &Path) -> Result<NonNull<u8>, TracerError> {
    // SAFETY: a fresh shared read-write mapping of a file we hold open.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(TracerError::io(path, std::io::Error::last_os_error()));
    }
    NonNull::new(p.cast()).ok_or_else(|| TracerError::io(path, std::io::Error::other("null map")))
}

/// Identity written into a new file.
pub struct Identity<'a> {
    pub job_id: &'a str,
    pub rank: u32,
    pub local_rank: u32,
    pub world_size: u32,
    pub pid: u32,
    pub anchor_mono_ns: u64,
    pub anchor_unix_ns: u64,
}

impl Mapping {
    /// Creates (or truncates) the file, sizes it and writes the header. The file is sparse:
    /// memory is used only for pages the rings actually touch.
    pub fn create(path: &Path, geo: Geometry, id: &Identity) -> Result<Mapping, TracerError> {
        if !geo.ring_capacity.is_power_of_two() || geo.ring_capacity < 64 {
            return Err(TracerError::Config(format!(
                "ring capacity must be a power of two >= 64 events, got {}",
                geo.ring_capacity
            )));
        }
        if geo.max_rings == 0 || geo.max_rings > 4096 {
            return Err(TracerError::Config(format!(
                "max rings must be in 1..=4096, got {}",
                geo.max_rings
            )));
        }
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Two copies of the tracer in one process (say, a Python extension and a
                // plugin each linking their own) must not wipe each other's rings; a file
                // left by a dead process whose pid was reused is stale and replaced.
                if let Ok(old) = Mapping::open(path) {
                    let h = old.header();
                    if h.pid == id.pid && h.state.load(Ordering::Acquire) == STATE_LIVE {
                        return Err(TracerError::Config(format!(
                            "{} is already written by another Flare tracer in this process (two copies of the library are loaded; point FLARE_LIBRARY at the one the application uses)",
                            path.display()
                        )));
                    }
                }
                std::fs::remove_file(path).map_err(|e| TracerError::io(path, e))?;
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .map_err(|e| TracerError::io(path, e))?
            }
            Err(e) => return Err(TracerError::io(path, e)),
        };
        let len = geo.file_size();
        file.set_len(len as u64)
            .map_err(|e| TracerError::io(path, e))?;
        let ptr = map_file(&file, len, path)?;
        let m = Mapping {
            ptr,
            len,
            path: path.to_path_buf(),
            _file: file,
        };
        // SAFETY: the file is new and zero-filled; nobody else has a valid header yet
        // (the magic is written last, so a consumer that maps early refuses the file).
        unsafe {
            let h = &mut *(m.ptr.as_ptr() as *mut FileHeader);
            h.version = LAYOUT_VERSION;
            h.event_size = EVENT_SIZE as u32;
            h.header_size = std::mem::size_of::<FileHeader>() as u32;
            h.ring_header_size = RING_HEADER_SIZE as u32;
            h.max_rings = geo.max_rings;
            h.ring_capacity = geo.ring_capacity;
            h.names_capacity = geo.names_capacity;
            h.rank = id.rank;
            h.local_rank = id.local_rank;
            h.world_size = id.world_size;
            h.pid = id.pid;
            h.rings_offset = geo.rings_offset() as u64;
            h.file_size = len as u64;
            h.anchor_mono_ns = id.anchor_mono_ns;
            h.anchor_unix_ns = id.anchor_unix_ns;
            write_fixed(&mut h.job_id, id.job_id);
            h.state.store(STATE_LIVE, Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Release);
            std::ptr::write_volatile(&mut h.magic, MAGIC);
        }
        Ok(m)
    }

    /// Opens an existing file and checks its header against its size.
    pub fn open(path: &Path) -> Result<Mapping, TracerError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| TracerError::io(path, e))?;
        let len = file.metadata().map_err(|e| TracerError::io(path, e))?.len() as usize;
        let bad = |what: String| TracerError::Format {
            path: path.to_path_buf(),
            what,
        };
        if len < PAGE {
            return Err(bad(format!(
                "{len} bytes, smaller than the {PAGE}-byte header"
            )));
        }
        let ptr = map_file(&file, len, path)?;
        let m = Mapping {
            ptr,
            len,
            path: path.to_path_buf(),
            _file: file,
        };
        let h = m.header();
        if h.magic != MAGIC {
            return Err(bad(
                "no FLARERNG magic (not a tracer file, or still being created)".into(),
            ));
        }
        if h.version != LAYOUT_VERSION {
            return Err(bad(format!(
                "layout version {} (this build reads {LAYOUT_VERSION})",
                h.version
            )));
        }
        if h.event_size as usize != EVENT_SIZE || h.ring_header_size as usize != RING_HEADER_SIZE {
            return Err(bad(format!(
                "event size {} / ring header size {} (expected {EVENT_SIZE} / {RING_HEADER_SIZE})",
                h.event_size, h.ring_header_size
            )));
        }
        let geo = m.geometry();
        if !geo.ring_capacity.is_power_of_two()
            || h.rings_offset as usize != geo.rings_offset()
            || geo.file_size() != len
            || h.file_size as usize != len
        {
            return Err(bad(format!(
                "header geometry ({} rings x {} events, {} name bytes) does not match the file size {len}",
                geo.max_rings, geo.ring_capacity, geo.names_capacity
            )));
        }
        Ok(m)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &FileHeader {
        // SAFETY: the mapping is at least a page and page-aligned; FileHeader fits in it.
        unsafe { &*(self.ptr.as_ptr() as *const FileHeader) }
    }

    pub fn geometry(&self) -> Geometry {
        let h = self.header();
        Geometry {
            max_rings: h.max_rings,
            ring_capacity: h.ring_capacity,
            names_capacity: h.names_capacity,
        }
    }

    pub fn ring(&self, i: u32) -> RingRef<'_> {
        let geo = self.geometry();
        assert!(i < geo.max_rings, "ring index out of range");
        let off = geo.rings_offset() + i as usize * geo.ring_stride();
        // SAFETY: `open`/`create` checked that every ring lies inside the mapping.
        unsafe {
            let base = self.ptr.as_ptr().add(off);
            RingRef {
                header: &*(base as *const RingHeader),
                slots: base.add(RING_HEADER_SIZE) as *mut Event,
                mask: geo.ring_capacity as u64 - 1,
                _m: std::marker::PhantomData,
            }
        }
    }

    /// The name-table bytes.
    pub(crate) fn names_ptr(&self) -> *mut u8 {
        // SAFETY: the name table starts at PAGE, inside the mapping.
        unsafe { self.ptr.as_ptr().add(PAGE) }
    }

    /// Looks a name up; `None` for ids outside the published part of the table.
    pub fn name(&self, id: NameId) -> Option<&str> {
        if id == NameId::NONE || id == NameId::OVERFLOW {
            return None;
        }
        let used = self.header().names_used.load(Ordering::Acquire) as usize;
        let off = id.0 as usize - 1;
        if off + 2 > used {
            return None;
        }
        // SAFETY: [0, used) of the table is published and immutable.
        let table = unsafe { std::slice::from_raw_parts(self.names_ptr(), used) };
        let len = u16::from_ne_bytes([table[off], table[off + 1]]) as usize;
        let bytes = table.get(off + 2..off + 2 + len)?;
        std::str::from_utf8(bytes).ok()
    }
}

/// A view of one ring.
#[derive(Clone, Copy)]
pub struct RingRef<'a> {
    pub header: &'a RingHeader,
    slots: *mut Event,
    mask: u64,
    _m: std::marker::PhantomData<&'a Mapping>,
}

impl RingRef<'_> {
    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// Producer side. Never blocks: a full ring counts a drop.
    #[inline]
    pub fn push(&self, ev: &Event) -> bool {
        let h = self.header;
        let head = h.head.load(Ordering::Relaxed);
        if head.wrapping_sub(h.tail_cache.load(Ordering::Relaxed)) > self.mask {
            let tail = h.tail.load(Ordering::Acquire);
            h.tail_cache.store(tail, Ordering::Relaxed);
            if head.wrapping_sub(tail) > self.mask {
                h.dropped
                    .store(h.dropped.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                return false;
            }
        }
        // SAFETY: slot `head` is free (the consumer is past it) and only this producer
        // writes it until `head` is published.
        unsafe { std::ptr::write(self.slots.add((head & self.mask) as usize), *ev) };
        self.header.head.store(head + 1, Ordering::Release);
        true
    }

    /// Consumer side: appends every published event to `out` and frees their slots.
    pub fn drain_into(&self, out: &mut Vec<Event>) -> usize {
        let tail = self.header.tail.load(Ordering::Relaxed);
        let head = self.header.head.load(Ordering::Acquire);
        // A producer that died mid-protocol cannot leave head behind tail, but guard anyway.
        let n = head.saturating_sub(tail).min(self.capacity());
        out.reserve(n as usize);
        for i in 0..n {
            // SAFETY: slots in [tail, head) are published by the producer's release store.
            out.push(unsafe { std::ptr::read(self.slots.add(((tail + i) & self.mask) as usize)) });
        }
        self.header.tail.store(tail + n, Ordering::Release);
        n as usize
    }

    /// The slot array as bytes (for the exit dump; racy by design for live producers).
    pub(crate) fn slots_bytes(&self) -> &[u8] {
        // SAFETY: the slot array lies inside the mapping.
        unsafe {
            std::slice::from_raw_parts(
                self.slots as *const u8,
                self.capacity() as usize * EVENT_SIZE,
            )
        }
    }

    pub fn pending(&self) -> u64 {
        let head = self.header.head.load(Ordering::Acquire);
        head.saturating_sub(self.header.tail.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("flare-shm-{}-{name}", std::process::id()))
    }

    fn identity() -> Identity<'static> {
        Identity {
            job_id: "j",
            rank: 0,
            local_rank: 0,
            world_size: 1,
            pid: 1,
            anchor_mono_ns: 0,
            anchor_unix_ns: 0,
        }
    }

    #[test]
    fn a_producer_and_a_consumer_on_two_threads_lose_nothing_and_keep_order() {
        let path = temp("spsc");
        let geo = Geometry {
            max_rings: 1,
            ring_capacity: 256,
            names_capacity: 4096,
        };
        let m = std::sync::Arc::new(Mapping::create(&path, geo, &identity()).unwrap());
        let total = 200_000u64;
        let p = m.clone();
        let producer = std::thread::spawn(move || {
            let r = p.ring(0);
            let mut sent = 0;
            let mut i = 0;
            while i < total {
                if r.push(&Event {
                    ts_ns: i,
                    a: i * 3,
                    ..Event::default()
                }) {
                    sent += 1;
                    i += 1;
                } else {
                    std::hint::spin_loop();
                }
            }
            sent
        });
        let mut got = Vec::new();
        let r = m.ring(0);
        while (got.len() as u64) < total {
            r.drain_into(&mut got);
        }
        assert_eq!(producer.join().unwrap(), total);
        for (i, e) in got.iter().enumerate() {
            assert_eq!((e.ts_ns, e.a), (i as u64, i as u64 * 3));
        }
        // The producer counted the pushes it had to retry as drops.
        assert_eq!(r.header.head.load(Ordering::Relaxed), total);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_live_file_of_this_process_is_never_overwritten_but_a_stale_one_is_replaced() {
        let path = temp("twice");
        let geo = Geometry {
            max_rings: 1,
            ring_capacity: 64,
            names_capacity: 4096,
        };
        let mut id = identity();
        id.pid = std::process::id();
        let first = Mapping::create(&path, geo, &id).unwrap();
        let e = Mapping::create(&path, geo, &id).err().unwrap().to_string();
        assert!(e.contains("another Flare tracer in this process"), "{e}");
        // A file left by another (dead) process with a reused pid is replaced.
        drop(first);
        let stale = Identity {
            pid: 1,
            ..identity()
        };
        std::fs::remove_file(&path).unwrap();
        drop(Mapping::create(&path, geo, &stale).unwrap());
        let again = Mapping::create(&path, geo, &id).unwrap();
        assert_eq!(again.header().pid, id.pid);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn open_refuses_files_that_are_not_tracer_files() {
        let path = temp("bad");
        std::fs::write(&path, vec![0u8; 100]).unwrap();
        let e = Mapping::open(&path).err().unwrap().to_string();
        assert!(e.contains("smaller than"), "{e}");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let e = Mapping::open(&path).err().unwrap().to_string();
        assert!(e.contains("magic"), "{e}");
        // A real header whose file was cut short.
        let geo = Geometry {
            max_rings: 2,
            ring_capacity: 64,
            names_capacity: 4096,
        };
        drop(Mapping::create(&path, geo, &identity()).unwrap());
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(geo.file_size() as u64 - 48).unwrap();
        let e = Mapping::open(&path).err().unwrap().to_string();
        assert!(e.contains("does not match the file size"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }
}
