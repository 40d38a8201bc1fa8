//! Memory an application can register: a sealed shared segment the daemon maps, so that a
//! peer's RDMA Writes and Reads land in and come from this very memory. Only buffers made
//! here can be registered (the types allow nothing else, and control checks the segment's
//! kind, creator and seals). Its size is sealed and its pages allocated when it is made, so
//! the daemon never touches a page that is gone or cannot be allocated.

use crate::error::Error;
use crate::shm::segment_name;
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use std::sync::{Arc, OnceLock};

/// A shared, registrable buffer (see [`crate::Context::alloc_buffer`]). The peer and the daemon may
/// write it at any time while registered, so it is read and written by copies, never lent
/// out as a Rust slice.
pub struct SharedBuffer {
    seg: Arc<Segment>,
    len: usize,
    /// The id control gave the segment when it was first offered for registration.
    attached: OnceLock<u32>,
}

impl core::fmt::Debug for SharedBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedBuffer")
            .field("len", &self.len)
            .field("path", &self.seg.path())
            .finish_non_exhaustive()
    }
}

impl SharedBuffer {
    pub(crate) fn new(len: usize) -> Result<SharedBuffer, Error> {
        if len == 0 {
            return Err(Error::InvalidLength {
                offset: 0,
                len: 0,
                region_len: 0,
            });
        }
        // Its descriptor stays open while the buffer lives: each registration names the
        // segment by `/proc/<pid>/fd/<fd>` to control and then to the daemon, whenever
        // the application registers. One per buffer, not per QP.
        let seg = Segment::create_sealed(
            &segment_name("buf"),
            SegmentKind::Memory,
            len,
            HugePolicy::Auto,
        )?;
        Ok(SharedBuffer {
            seg: Arc::new(seg),
            len,
            attached: OnceLock::new(),
        })
    }

    /// Its id in control, attached by `attach` the first time.
    pub(crate) fn attached_id(
        &self,
        attach: impl FnOnce(&Segment) -> Result<u32, Error>,
    ) -> Result<u32, Error> {
        if let Some(id) = self.attached.get() {
            return Ok(*id);
        }
        let id = attach(&self.seg)?;
        Ok(*self.attached.get_or_init(|| id))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first octet (for applications that manage the memory themselves).
    pub fn as_ptr(&self) -> *mut u8 {
        self.seg.data().as_ptr()
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), Error> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::InvalidLength {
                offset: offset as u64,
                len: len as u64,
                region_len: self.len as u64,
            });
        }
        Ok(())
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        self.check(offset, data.len())?;
        // SAFETY: the range lies inside the mapped data area (checked), which lives as long
        // as `self.seg`; a plain byte copy into shared memory others may also write.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    /// Copies `out.len()` octets at `offset` out of the buffer.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        self.check(offset, out.len())?;
        // SAFETY: as in `write`, reading.
        unsafe {
            core::ptr::copy_nonoverlapping(self.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// The octets at `offset..offset + len`, copied.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>, Error> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// The 8 octets at `offset` as a little-endian integer (an atomic's target or result).
    pub fn read_u64(&self, offset: usize) -> Result<u64, Error> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}
