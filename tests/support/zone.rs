//! A zone a test drives as a value, unmapped when the test ends.

use pcpalloc::internals::{Zone, ZoneConfig};

/// A zone of its own for one test (its memory unmapped on drop).
pub struct TestZone(Box<Zone>);

impl TestZone {
    pub fn with_config(cfg: &ZoneConfig) -> TestZone {
        TestZone(Box::new(Zone::with_config(cfg)))
    }
}

impl Drop for TestZone {
    fn drop(&mut self) {
        // SAFETY: the test is over; nothing uses the zone's memory.
        unsafe { self.0.destroy() }
    }
}

impl std::ops::Deref for TestZone {
    type Target = Zone;
    fn deref(&self) -> &Zone {
        &self.0
    }
}
