//! The engine's thread helpers: work split into contiguous ranges or one item per
//! thread, on scoped threads, the calling thread taking the first share itself; and how
//! many threads an iteration is worth. Results come back in a fixed order, so that no
//! answer depends on how many threads computed it.

/// Runs `f` over `n` items split into contiguous ranges, one per thread, and returns the
/// results in range order.
pub(crate) fn par_ranges<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(std::ops::Range<usize>) -> T + Sync,
) -> Vec<T> {
    let threads = threads.clamp(1, n.max(1));
    if threads == 1 {
        return vec![f(0..n)];
    }
    let per = n.div_ceil(threads);
    // The calling thread takes the first range itself (see `par_each`).
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads)
            .map(|t| {
                let lo = (t * per).min(n);
                let hi = ((t + 1) * per).min(n);
                let f = &f;
                s.spawn(move || f(lo..hi))
            })
            .collect();
        let mut out = vec![f(0..per.min(n))];
        out.extend(
            handles
                .into_iter()
                .map(|h| h.join().expect("engine worker panicked")),
        );
        out
    })
}

/// Runs `f` on each item of `items` on its own thread (one item per thread).
pub(crate) fn par_each<T: Send>(items: &mut [T], f: impl Fn(usize, &mut T) + Sync) {
    if items.len() <= 1 {
        if let Some(x) = items.first_mut() {
            f(0, x);
        }
        return;
    }
    // The calling thread takes the first item itself rather than wait: on this machine
    // threads it spawned and waited on were measured to take up to twice as long over
    // the same share (the per-rank pass: 25 against 19 ms).
    let (first, rest) = items.split_first_mut().expect("two items or more");
    std::thread::scope(|s| {
        for (i, x) in rest.iter_mut().enumerate() {
            let f = &f;
            s.spawn(move || f(i + 1, x));
        }
        f(0, first);
    });
}

/// Threads for an iteration of this many ops: spawning is not worth it for small ones.
pub(crate) fn threads_for(ops: usize, configured: usize) -> usize {
    if ops < 40_000 {
        1
    } else {
        configured.max(1)
    }
}

/// Runs `a` and `b`: with `parallel`, `b` on a thread of its own while the calling thread
/// runs `a`; else `a`, then `b`.
pub(crate) fn join<A, B: Send>(
    parallel: bool,
    a: impl FnOnce() -> A,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    if parallel {
        std::thread::scope(|s| {
            let other = s.spawn(b);
            let mine = a();
            (mine, other.join().expect("engine worker panicked"))
        })
    } else {
        (a(), b())
    }
}
