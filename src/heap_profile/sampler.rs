//! Which allocations a thread samples: one countdown per small size class
//! and one for blocks above 8 KiB, each drawn from the exponential
//! distribution, so a sample falls on each allocated byte with the same
//! chance whatever the program's rhythm (tcmalloc's and jemalloc's
//! sampling; a fixed interval would alias with a periodic program).
//!
//! Sampling is a Poisson process over the bytes allocated, with one point
//! per `mean` bytes on average; an allocation is sampled when a point
//! falls in it, which happens with probability `1 - exp(-size/mean)`, so
//! a sample of `size` bytes stands for `size / (1 - exp(-size/mean))`
//! bytes allocated ([`weight`]: tcmalloc's and jemalloc's unbiasing).
//! Splitting the byte stream in sub-streams — one per small class, one for
//! the rest — and giving each its own process changes nothing about
//! which bytes are sampled (each sub-stream's process is again Poisson of
//! the same rate), and lets a small class's countdown be counted in
//! objects: the bin of that class hands out exactly that many before its
//! slow path runs (`heap/bin.rs`: pushes give no pop credit while
//! sampling), with no counter on the fast path.
//!
//! A small class's countdown is `floor(B / size)` allocations for a draw
//! `B` of the exponential distribution: a geometric number, each
//! allocation sampled with probability `1 - exp(-size/mean)` as above.
//! After a sample the next draw starts at the end of the sampled
//! allocation (the process is memoryless).
//!
//! Pure state and arithmetic: the runtime's hooks (`runtime/sampled.rs`)
//! own the decisions' effects.

/// A thread's sampling state (owner-only: its heap's).
#[derive(Debug)]
pub struct Sampler<const N: usize> {
    /// Per small class, the allocations before the one a sample falls on.
    until: [u32; N],
    /// Per small class, what a sample of it stands for at the rate drawn
    /// for ([`weight`], whose `expm1` is a tenth of a sample's cost).
    small_weights: [(u64, u64); N],
    /// Bytes of blocks above 8 KiB before the point of the next sample.
    large_until: u64,
    /// xorshift64* state (0: not seeded yet).
    rng: u64,
    /// The [`Rate::generation`] these countdowns were drawn for
    /// ([`NEVER`] before the first draw), plus [`BUSY`] while the thread
    /// takes a sample (the allocations the unwinder makes meanwhile are
    /// not sampled): one compare tells whether the countdowns are in
    /// force.
    generation: u32,
    /// The top of this heap's sample stack (`sample_stack.rs`), 0 until
    /// its first sample maps it.
    pub(crate) stack_top: usize,
}

/// In a sampler's generation while its thread takes a sample.
const BUSY: u32 = 1 << 31;
/// A sampler's generation before its first draw, which no rate has.
const NEVER: u32 = 1 << 30;
/// The last generation a rate may have; the next is 1 again.
pub(crate) const GENERATION_MAX: u32 = NEVER - 1;

/// The sampling rate every thread follows, and a generation that moves
/// whenever it changes (so every thread draws its countdowns again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Mean bytes between samples (0: not sampling).
    pub mean: u64,
    /// Moves at each change of `mean`.
    pub generation: u32,
}

/// One in 2^53: the resolution of a uniform draw.
const UNIFORM_STEP: f64 = 1.0 / (1u64 << 53) as f64;
/// Weights' object counts are kept in units of 1/OBJECT_SCALE objects, so
/// that adding and later removing a sample cancels exactly.
pub(crate) const OBJECT_SCALE: u64 = 1024;

impl<const N: usize> Sampler<N> {
    /// A sampler that draws its countdowns on first use.
    pub const fn new() -> Self {
        Sampler {
            until: [0; N],
            small_weights: [(0, 0); N],
            large_until: 0,
            rng: 0,
            generation: NEVER,
            stack_top: 0,
        }
    }

    /// Draws every countdown again if the rate changed since they were
    /// drawn (or never were), seeding with `seed()` the first time. True
    /// if it did: the caller then caps what its bins may hand out.
    #[inline]
    pub fn sync(&mut self, rate: Rate, sizes: &[u32; N], seed: impl FnOnce() -> u64) -> bool {
        debug_assert!(!self.busy());
        if self.generation == rate.generation {
            return false;
        }
        self.redraw(rate, sizes, seed());
        true
    }

    #[cold]
    fn redraw(&mut self, rate: Rate, sizes: &[u32; N], seed: u64) {
        if self.rng == 0 {
            self.rng = seed | 1;
        }
        self.generation = rate.generation;
        for (class, &size) in sizes.iter().enumerate() {
            self.until[class] = self.draw_objects(rate.mean, size);
            self.small_weights[class] = weight(size as usize, rate.mean);
        }
        self.large_until = self.draw_bytes(rate.mean);
    }

    /// Whether the countdowns were drawn for rate generation `generation`
    /// (in `1..=GENERATION_MAX`) and the thread is not inside a sample.
    #[inline]
    pub fn ready(&self, generation: u32) -> bool {
        self.generation == generation
    }

    /// Whether the thread is inside a sample.
    #[inline]
    pub fn busy(&self) -> bool {
        self.generation & BUSY != 0
    }

    /// Marks the thread inside a sample, or out of it.
    #[inline]
    pub fn set_busy(&mut self, busy: bool) {
        if busy {
            self.generation |= BUSY;
        } else {
            self.generation &= !BUSY;
        }
    }

    /// Whether the next allocation of small class `class` is sampled.
    #[inline]
    pub fn small_due(&self, class: usize) -> bool {
        self.until[class] == 0
    }

    /// Counts `n` allocations of small class `class` that were not
    /// sampled (at most its countdown).
    #[inline]
    pub fn count_small(&mut self, class: usize, n: u32) {
        debug_assert!(n <= self.until[class]);
        self.until[class] -= n;
    }

    /// The countdown of small class `class`, for a caller that counts
    /// the allocations it lets go unsampled off it at once.
    ///
    /// # Safety
    /// `class < N` (unchecked: the allocation slow path's index).
    #[inline]
    pub unsafe fn small_countdown(&mut self, class: usize) -> &mut u32 {
        debug_assert!(class < N);
        // SAFETY: in range (contract).
        unsafe { self.until.get_unchecked_mut(class) }
    }

    /// The allocations of small class `class` that may go unsampled from
    /// now on, at most `avail`; they are counted at once.
    #[inline]
    pub fn grant_small(&mut self, class: usize, avail: u32) -> u32 {
        let g = avail.min(self.until[class]);
        self.until[class] -= g;
        g
    }

    /// What a sample of small class `class` stands for ([`weight`] of its
    /// size at the rate the countdowns were drawn for).
    #[inline]
    pub fn small_weight(&self, class: usize) -> (u64, u64) {
        self.small_weights[class]
    }

    /// An allocation of small class `class` (of `size` bytes) was sampled:
    /// the next countdown starts.
    pub fn sampled_small(&mut self, class: usize, size: u32, mean: u64) {
        self.until[class] = self.draw_objects(mean, size);
    }

    /// Counts an allocation of `size` bytes above the small classes; true
    /// if a sample falls in it (the next countdown then starts).
    #[inline]
    pub fn count_large(&mut self, size: usize, mean: u64) -> bool {
        let size = size as u64;
        if size < self.large_until {
            self.large_until -= size;
            return false;
        }
        self.large_until = self.draw_bytes(mean);
        true
    }

    /// [`count_large`](Self::count_large)'s common case, for the large
    /// allocation path: if the countdowns are in force for `generation`
    /// and no sample falls in `size` bytes, counts them and returns true;
    /// else false, nothing changed (the caller takes the whole path).
    #[inline(always)]
    pub fn count_large_undue(&mut self, size: usize, generation: u32) -> bool {
        let size = size as u64;
        if self.generation != generation || size >= self.large_until {
            return false;
        }
        self.large_until -= size;
        true
    }

    /// A uniform draw in (0, 1].
    fn uniform(&mut self) -> f64 {
        // xorshift64* (Vigna): enough for sampling intervals.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((r >> 11) + 1) as f64 * UNIFORM_STEP
    }

    /// Bytes to the next point of a Poisson process of one point per
    /// `mean` bytes.
    fn draw_bytes(&mut self, mean: u64) -> u64 {
        let b = -libm::log(self.uniform()) * mean as f64;
        if b >= u64::MAX as f64 {
            u64::MAX
        } else {
            b as u64
        }
    }

    /// Allocations of `size` bytes before the one the next point falls on.
    fn draw_objects(&mut self, mean: u64, size: u32) -> u32 {
        let n = self.draw_bytes(mean) / u64::from(size.max(1));
        n.min(u64::from(u32::MAX)) as u32
    }
}

impl<const N: usize> Default for Sampler<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// What a sample of `size` bytes stands for at one sample per `mean`
/// bytes: (bytes allocated, objects allocated × [`OBJECT_SCALE`]), both
/// rounded: `size / (1 - exp(-size/mean))` and `1 / (1 - exp(-size/mean))`.
pub fn weight(size: usize, mean: u64) -> (u64, u64) {
    let size = size.max(1) as f64;
    // 1 - exp(-x), precise for small x.
    let p = -libm::expm1(-size / mean.max(1) as f64);
    let objects = 1.0 / p;
    // Rounded by adding a half (both are positive and far below 2^52):
    // `f64::round` is a call into the C library, half a sample's weight.
    (
        (size * objects + 0.5) as u64,
        (objects * OBJECT_SCALE as f64 + 0.5) as u64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_follow_the_unbiasing_formula() {
        // Far below the mean: a sample stands for about mean bytes.
        let (b, o) = weight(16, 512 << 10);
        assert!((b as f64 - (512 << 10) as f64).abs() < 16.0, "{b}");
        assert!((o as f64 / OBJECT_SCALE as f64 - 32768.0).abs() < 1.0);
        // Far above it: a sample stands for itself.
        let (b, o) = weight(64 << 20, 512 << 10);
        assert_eq!(b, 64 << 20);
        assert_eq!(o, OBJECT_SCALE);
        // At the mean: size / (1 - 1/e).
        let (b, _) = weight(1 << 20, 1 << 20);
        assert!((b as f64 / (1 << 20) as f64 - 1.581_976_7).abs() < 1e-6);
    }

    /// The large path's inline count agrees with the whole one: it counts
    /// a block no sample falls in, and leaves everything else — a sample
    /// due, another generation, a thread inside a sample — untouched.
    #[test]
    fn the_inline_large_count_leaves_samples_to_the_whole_path() {
        let rate = Rate {
            mean: 1 << 20,
            generation: 3,
        };
        let mut s = Sampler::<1>::new();
        assert!(
            !s.count_large_undue(4096, 3),
            "counted before the first draw"
        );
        s.sync(rate, &[64], || 7);
        let mut whole = Sampler::<1>::new();
        whole.sync(rate, &[64], || 7);
        let mut blocks = 0;
        loop {
            let before = s.large_until;
            if !s.count_large_undue(64 << 10, 3) {
                assert_eq!(s.large_until, before, "changed on a sample");
                assert!(whole.count_large(64 << 10, rate.mean), "a sample missed");
                break;
            }
            assert!(!whole.count_large(64 << 10, rate.mean));
            assert_eq!(s.large_until, whole.large_until);
            blocks += 1;
        }
        assert!(blocks < 10_000);
        assert!(!s.count_large_undue(1, 4), "counted for another generation");
        s.set_busy(true);
        assert!(!s.count_large_undue(1, 3), "counted inside a sample");
    }

    #[test]
    fn small_countdowns_are_geometric() {
        // Objects of 1 KiB at one sample per 64 KiB: each allocation is
        // sampled with p = 1 - exp(-1/64); the mean countdown (1-p)/p.
        let sizes = [1024u32; 1];
        let mut s = Sampler::<1>::new();
        s.sync(
            Rate {
                mean: 64 << 10,
                generation: 1,
            },
            &sizes,
            || 42,
        );
        let (mut total, rounds) = (0u64, 20_000);
        for _ in 0..rounds {
            total += u64::from(s.until[0]);
            s.sampled_small(0, 1024, 64 << 10);
        }
        let p = 1.0 - (-1.0f64 / 64.0).exp();
        let want = (1.0 - p) / p;
        let got = total as f64 / rounds as f64;
        assert!(
            (got - want).abs() / want < 0.03,
            "mean countdown {got}, want {want}"
        );
    }

    #[test]
    fn large_samples_hit_with_the_right_probability() {
        let sizes = [16u32; 1];
        let mut s = Sampler::<1>::new();
        s.sync(
            Rate {
                mean: 1 << 20,
                generation: 1,
            },
            &sizes,
            || 7,
        );
        let hits = (0..20_000)
            .filter(|_| s.count_large(256 << 10, 1 << 20))
            .count();
        let want = 1.0 - (-0.25f64).exp();
        let got = hits as f64 / 20_000.0;
        assert!((got - want).abs() < 0.015, "{got} against {want}");
    }

    #[test]
    fn a_new_generation_draws_again() {
        let sizes = [64u32; 2];
        let mut s = Sampler::<2>::new();
        assert!(s.sync(
            Rate {
                mean: 4096,
                generation: 1
            },
            &sizes,
            || 3,
        ));
        assert!(!s.sync(
            Rate {
                mean: 4096,
                generation: 1
            },
            &sizes,
            || 3,
        ));
        assert!(s.sync(
            Rate {
                mean: 4096,
                generation: 2
            },
            &sizes,
            || 3,
        ));
        let g = s.grant_small(1, u32::MAX);
        assert!(s.small_due(1));
        s.sampled_small(1, 64, 4096);
        let _ = g;
    }

    #[test]
    fn small_weights_are_those_of_the_rate_drawn_for() {
        let sizes = [16u32, 1024];
        let mut s = Sampler::<2>::new();
        for (mean, generation) in [(4096, 1), (512 << 10, 2)] {
            assert!(s.sync(Rate { mean, generation }, &sizes, || 5));
            assert_eq!(s.small_weight(0), weight(16, mean));
            assert_eq!(s.small_weight(1), weight(1024, mean));
        }
    }
}
