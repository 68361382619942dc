//! Reading a large log file around the page cache (`O_DIRECT`) when it is not cached.
//!
//! A failed job's logs are read once, cold. Read through the page cache, the kernel
//! copies every byte from the cache into the process: on a 2-core machine that copy is a
//! third of a large job's diagnosis (10 of 35 CPU-seconds for 17 GB). Read directly, the
//! disk writes into our buffer and the CPU only copies it, hot, into the chunk being
//! built. A file whose first page is already in the page cache is read through it (a
//! second diagnosis of the same logs costs no disk reads), and so is every file where
//! the file system refuses direct reads (tmpfs), compressed files and small ones. Asking
//! whether a page is cached reads nothing (`mincore`), so it never warms what it asks
//! about.

use std::fs::File;
use std::io::{self, Read};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of one direct read: a multiple of every block size in use (512 B to 4 KB).
const READ_BYTES: usize = 256 << 10;
/// The alignment direct reads need, of the buffer and the file offset.
pub const ALIGN: usize = 4096;
/// Files smaller than this are read as usual: their copy costs little.
const MIN_DIRECT_BYTES: u64 = READ_BYTES as u64;

/// Whether most of `files` (a sample of those large enough to be read directly, spread
/// over the list) are not in the page cache: then they are read directly, and more
/// readers keep the disk busy (each waits for its reads; cached files need only as many
/// readers as the cores, and more cost the fold its share of them).
pub fn mostly_cold(files: &[std::path::PathBuf]) -> bool {
    let (mut cold, mut seen) = (0, 0);
    // from evenly spread places, the first large file (a node's directory may start with
    // small files, at the same place in every directory)
    let places = SAMPLE.min(files.len());
    for k in 0..places {
        let from = k * files.len() / places;
        let large = files[from..].iter().take(16).find_map(|p| {
            let f = File::open(p).ok()?;
            (f.metadata().ok()?.len() >= MIN_DIRECT_BYTES).then_some(f)
        });
        if let Some(f) = large {
            seen += 1;
            cold += usize::from(!sys::first_page_cached(&f));
        }
    }
    seen > 0 && 2 * cold > seen
}

/// Files `mostly_cold` asks about at most.
const SAMPLE: usize = 16;

/// Readers reading a file directly, now (each such reader needs room ahead of the fold).
#[derive(Default)]
pub struct DirectReaders(AtomicUsize);

/// A file being read directly, counted until dropped.
pub struct DirectReading<'a>(Option<&'a DirectReaders>);

impl DirectReaders {
    /// `file` (`len` bytes) read directly where it is large, not cached and allowed,
    /// counted while the returned guard lives; otherwise as usual.
    pub fn open(&self, file: File, len: u64) -> (Box<dyn Read + Send>, DirectReading<'_>) {
        if len < MIN_DIRECT_BYTES {
            return (Box::new(file), DirectReading(None));
        }
        match DirectRead::try_new(file) {
            Ok(d) => {
                self.0.fetch_add(1, Ordering::Relaxed);
                (Box::new(d), DirectReading(Some(self)))
            }
            Err(f) => (Box::new(f), DirectReading(None)),
        }
    }

    pub fn now(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for DirectReading<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.0 {
            d.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A file read directly in aligned blocks, handed out to any reader.
struct DirectRead {
    file: File,
    /// `READ_BYTES + ALIGN` bytes once a caller's buffer could not take a read (it
    /// was not aligned, or short), empty until then; the aligned block starts at `at`.
    buf: Vec<u8>,
    at: usize,
    start: usize,
    end: usize,
    /// Still reading directly; cleared when a read is refused (an offset left unaligned
    /// by a short read), the rest of the file then read as usual.
    direct: bool,
}

impl DirectRead {
    /// `file` read directly when it is not in the page cache and its file system allows
    /// it; otherwise the file handed back untouched.
    fn try_new(file: File) -> Result<DirectRead, File> {
        if sys::first_page_cached(&file) {
            return Err(file);
        }
        if sys::set_direct(&file, true).is_err() {
            return Err(file);
        }
        Ok(DirectRead {
            file,
            buf: Vec::new(),
            at: 0,
            start: 0,
            end: 0,
            direct: true,
        })
    }
}

impl Read for DirectRead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.start == self.end {
            if !self.direct {
                return self.file.read(out);
            }
            // the disk writes into the caller's buffer where it is aligned and a whole
            // block long (the reader places its chunks so), else into ours
            let into_out = out.as_ptr().align_offset(ALIGN) == 0 && out.len() >= READ_BYTES;
            let block = if into_out {
                &mut out[..READ_BYTES]
            } else {
                if self.buf.is_empty() {
                    // zeroed once, by the allocator (a large job reads most files
                    // without it: each file's buffer was 3 GB of zeroing in all)
                    self.buf = vec![0u8; READ_BYTES + ALIGN];
                    self.at = self.buf.as_ptr().align_offset(ALIGN);
                }
                if self.at >= ALIGN {
                    // no aligned block in it (never so for bytes): read as usual
                    sys::set_direct(&self.file, false)?;
                    self.direct = false;
                    return self.file.read(out);
                }
                &mut self.buf[self.at..self.at + READ_BYTES]
            };
            let n = loop {
                match self.file.read(block) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // EINVAL
                    Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                        // the offset is no longer aligned: the rest as usual, from here
                        sys::set_direct(&self.file, false)?;
                        self.direct = false;
                        return self.file.read(out);
                    }
                    Err(e) => return Err(e),
                }
            };
            if into_out {
                return Ok(n);
            }
            self.start = self.at;
            self.end = self.at + n;
        }
        let n = out.len().min(self.end - self.start);
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        Ok(n)
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod sys {
    use std::fs::File;
    use std::io;
    use std::os::unix::io::AsRawFd;

    /// Sets or clears `O_DIRECT` on the open file.
    pub fn set_direct(file: &File, on: bool) -> io::Result<()> {
        let fd = file.as_raw_fd();
        // SAFETY: `fd` is open for as long as `file` lives; F_GETFL and F_SETFL only read
        // and set the descriptor's status flags.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 {
                return Err(io::Error::last_os_error());
            }
            let flags = if on {
                flags | libc::O_DIRECT
            } else {
                flags & !libc::O_DIRECT
            };
            if libc::fcntl(fd, libc::F_SETFL, flags) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Whether the file's first page is in the page cache (`mincore` of a mapping never
    /// touched: asking reads nothing, unlike a read that may not wait, which starts the
    /// file's read-ahead). Where the kernel cannot say, the file counts as cached (read as
    /// usual).
    pub fn first_page_cached(file: &File) -> bool {
        // SAFETY: sysconf only reads a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page <= 0 {
            return true;
        }
        let page = page as usize;
        // SAFETY: a fresh private read-only mapping of the file's first page, of a
        // descriptor open for the call; it is never read (so no page fault, no I/O), and
        // is unmapped before returning; `resident` has room for the one page's flag.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            );
            if p == libc::MAP_FAILED {
                return true;
            }
            let mut resident = [0u8; 1];
            let asked = libc::mincore(p, page, resident.as_mut_ptr());
            libc::munmap(p, page);
            asked != 0 || resident[0] & 1 == 1
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod sys {
    /// Elsewhere files are read as usual: every file counts as cached, and direct reads
    /// are refused.
    pub fn set_direct(_: &std::fs::File, _: bool) -> std::io::Result<()> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    pub fn first_page_cached(_: &std::fs::File) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};

    /// Whatever way a file ends up read (directly, or as usual where the file system
    /// refuses, or after a refused read), every byte comes back in order.
    #[test]
    fn a_file_reads_back_byte_for_byte() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("rank0.log");
        let mut f = File::create(&path).expect("create");
        // not a multiple of any block size: the last read is short
        let text: Vec<u8> = (0..700_001u32)
            .flat_map(|i| format!("step {i} loss {}\n", i % 97).into_bytes())
            .take(3 * READ_BYTES + 12_345)
            .collect();
        f.write_all(&text).expect("write");
        f.sync_all().expect("sync");
        drop(f);
        let direct_allowed = sys::set_direct(&File::open(&path).expect("open"), true).is_ok();
        evict(&path);
        // read into an odd-sized buffer (as `take` makes near a limit), or into an aligned
        // whole block (as the chunk reader places its reads: the disk writes there)
        let mut aligned = vec![0u8; READ_BYTES + ALIGN];
        let at = aligned.as_ptr().align_offset(ALIGN);
        for (skip, into_aligned) in [(0usize, false), (1000, false), (0, true), (1000, true)] {
            let mut file = File::open(&path).expect("open");
            file.seek(SeekFrom::Start(skip as u64)).expect("seek");
            let mut back = Vec::new();
            let read = DirectRead::try_new(file);
            // a cold file where direct reads are allowed is read directly
            assert_eq!(read.is_ok(), direct_allowed, "skip {skip}");
            match read {
                Ok(mut d) => {
                    let mut part = [0u8; 7_777];
                    loop {
                        let into: &mut [u8] = if into_aligned {
                            &mut aligned[at..at + READ_BYTES]
                        } else {
                            &mut part
                        };
                        let n = d.read(into).expect("read");
                        if n == 0 {
                            break;
                        }
                        back.extend_from_slice(&into[..n]);
                    }
                    // from an unaligned offset the kernel refuses: read as usual instead
                    assert_eq!(d.direct, skip == 0, "skip {skip}");
                }
                Err(mut f) => {
                    f.read_to_end(&mut back).expect("read");
                }
            }
            assert_eq!(back.len(), text.len() - skip, "skip {skip}");
            assert!(back == text[skip..], "skip {skip}");
            evict(&path);
        }
    }

    /// A simulated job's logs (per-rank files of about 600 KB, a GPU fallen off the bus)
    /// diagnosed cold, read directly where allowed, and again from the page cache: the
    /// same document.
    #[test]
    fn a_job_read_directly_is_diagnosed_as_one_read_through_the_cache() {
        use flare_sim::logs::{JobLogs, LogFault, LogSimConfig};
        let dir = tempfile::tempdir().expect("temp dir");
        let logs = JobLogs::new(LogSimConfig {
            ranks: 16,
            gpus_per_node: 8,
            iterations: 4_000,
            fault: LogFault::GpuFellOffBus,
            seed: 7,
        });
        let mut paths = Vec::new();
        for f in logs.files() {
            let path = dir.path().join(&f.path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            let mut text = String::new();
            logs.lines(&f, &mut |l| {
                text.push_str(l);
                text.push('\n');
            });
            let mut out = File::create(&path).expect("create");
            out.write_all(text.as_bytes()).expect("write");
            out.sync_all().expect("sync");
            paths.push(path);
        }
        let large = paths
            .iter()
            .filter(|p| std::fs::metadata(p).expect("stat").len() >= MIN_DIRECT_BYTES)
            .count();
        assert!(
            large >= 16,
            "{large} files large enough to be read directly"
        );
        let diagnose = || {
            let lim = flare_import::limits::Limits::default();
            let inputs = [dir.path().to_path_buf()];
            let (d, notes) =
                super::super::diagnose::diagnose_paths(&inputs, &[], &lim).expect("diagnosed");
            super::super::diagnose::document(&inputs, &d, notes, 0.0).to_json()
        };
        paths.iter().for_each(|p| evict(p));
        let direct_allowed = sys::set_direct(&File::open(&paths[0]).expect("open"), true).is_ok();
        assert_eq!(mostly_cold(&paths), direct_allowed);
        let cold = diagnose();
        for p in &paths {
            std::fs::read(p).expect("read");
        }
        assert!(!mostly_cold(&paths));
        let warm = diagnose();
        assert_eq!(cold, warm);
        assert!(warm.contains("gpu_hardware"), "{warm}");
    }

    /// Drops the file's (clean) pages from the page cache.
    fn evict(path: &std::path::Path) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            use std::os::unix::io::AsRawFd;
            let f = File::open(path).expect("open");
            // SAFETY: the descriptor is open for the call; the advice only drops clean
            // cached pages of the file.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }
}
