//! Landing a read's data in its caller's memory: a reply's payload received
//! from the socket straight into memory the caller lends (the FUSE mount's
//! io_uring entry, which the kernel copies the reply from), instead of into
//! a buffer of its own that the caller would copy again.
//!
//! A cold read through the mount is bound by the CPU on a small machine, and
//! most of its CPU is copies of the same bytes; this one was 5-7% of it
//! (`bench/results/changes.md`).
//!
//! The memory is lent by value, never by reference: a request that is given
//! up may still have its reply arriving, and the connection's reader must
//! never write into memory its caller has already handed back. So the
//! landing moves to the connection with the request and comes back with the
//! reply (or with the news that the connection was lost, for the request to
//! be sent again and land there too), and whoever holds it last drops it.

use std::any::Any;
use std::sync::Mutex;

/// Memory a read's data can be received into.
pub trait Landing: Any + Send {
    /// The memory: as many bytes as the read asked for, filled from the start.
    fn space(&mut self) -> &mut [u8];
}

/// Where a read's data is.
#[derive(Debug)]
pub enum ReadData {
    /// The first this many bytes of the landing the read was lent.
    Landed(usize),
    /// These bytes (a read that did not land: from several servers, or
    /// with no landing lent).
    Bytes(bytes::Bytes),
}

impl ReadData {
    /// Bytes of data.
    pub fn len(&self) -> usize {
        match self {
            ReadData::Landed(n) => *n,
            ReadData::Bytes(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A landing lent to one read, between its trips to the connection.
pub(crate) struct Lent {
    state: Mutex<State>,
}

struct State {
    /// None while a connection holds it.
    landing: Option<Box<dyn Landing>>,
    /// The payload bytes the last reply put in it, if it landed there.
    landed: Option<usize>,
}

impl Lent {
    pub fn new(landing: Box<dyn Landing>) -> Lent {
        Lent {
            state: Mutex::new(State {
                landing: Some(landing),
                landed: None,
            }),
        }
    }

    /// The landing, for a request to take to its connection.
    pub fn take(&self) -> Option<Box<dyn Landing>> {
        let mut s = self.state.lock().unwrap();
        s.landed = None;
        s.landing.take()
    }

    /// The landing back from a connection, holding `landed` bytes of the
    /// reply's payload if it landed there.
    pub fn give_back(&self, landing: Box<dyn Landing>, landed: Option<usize>) {
        let mut s = self.state.lock().unwrap();
        assert!(
            s.landing.is_none(),
            "a landing is lent to one request at a time"
        );
        s.landing = Some(landing);
        s.landed = landed;
    }

    /// Bytes of the last reply's payload that landed, if it did.
    pub fn landed(&self) -> Option<usize> {
        self.state.lock().unwrap().landed
    }

    /// Runs `f` on the landing's memory (which must be back).
    pub fn with_space<T>(&self, f: impl FnOnce(&mut [u8]) -> T) -> T {
        let mut s = self.state.lock().unwrap();
        f(s.landing
            .as_mut()
            .expect("a landing is back once its read is done")
            .space())
    }

    /// The landing, given back to its owner as what it was lent as.
    pub fn into_inner<L: Landing>(self) -> L {
        let landing = self
            .state
            .into_inner()
            .unwrap()
            .landing
            .expect("a landing is back once its read is done");
        let any: Box<dyn Any> = landing;
        *any.downcast::<L>()
            .expect("a landing comes back as the type it was lent as")
    }
}

/// Plain memory as a landing, for tests.
#[cfg(test)]
pub(crate) struct Memory(pub Vec<u8>);

#[cfg(test)]
impl Landing for Memory {
    fn space(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_landing_goes_out_and_comes_back_as_itself() {
        let lent = Lent::new(Box::new(Memory(vec![0; 4])));
        let mut out = lent.take().unwrap();
        assert!(lent.take().is_none(), "lent to one request at a time");
        out.space()[..2].copy_from_slice(b"ab");
        lent.give_back(out, Some(2));
        assert_eq!(lent.landed(), Some(2));
        lent.with_space(|s| s[2..].fill(b'z'));
        let again = lent.take().unwrap();
        assert_eq!(
            lent.landed(),
            None,
            "a new trip forgets the last one's bytes"
        );
        lent.give_back(again, None);
        assert_eq!(lent.into_inner::<Memory>().0, b"abzz");
    }
}
