//! The workspace feed's cursor (contract v1.4): a position in the feed's order, (transaction
//! id, job id, seq), made opaque and bound to its workspace.
//!
//! Invariant: a cursor names a position, never grants anything, so it carries no secret; its
//! tag (the first 8 bytes of SHA-256 over a label, the workspace and the position) makes one
//! the server did not make, a garbled one, or one of another workspace fail [`Cursor::decode`]
//! (`400 bad_request` naming `after`). Positions survive a failover: transaction ids carry over
//! to a physical standby.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// A position in a workspace's feed: every event at or before it has been answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// The writing transaction's id (`xid8`, below 2^63 in practice).
    pub xid: i64,
    pub job: Uuid,
    pub seq: i32,
}

const LEN: usize = 8 + 16 + 4;
const TAG: usize = 8;

fn tag(workspace: &str, body: &[u8]) -> [u8; TAG] {
    let mut h = Sha256::new();
    h.update(b"leasehold feed cursor v1\0");
    h.update(workspace.as_bytes());
    h.update([0]);
    h.update(body);
    let digest = h.finalize();
    let mut out = [0; TAG];
    out.copy_from_slice(&digest[..TAG]);
    out
}

impl Cursor {
    /// Before every event.
    pub const START: Cursor = Cursor {
        xid: 0,
        job: Uuid::nil(),
        seq: 0,
    };

    /// After every event of transactions up to `xid` (the oldest cursor past a pruned range).
    pub fn after_xid(xid: i64) -> Cursor {
        Cursor {
            xid,
            job: Uuid::max(),
            seq: i32::MAX,
        }
    }

    /// The opaque form, for `workspace` only.
    pub fn encode(&self, workspace: &str) -> String {
        let mut body = Vec::with_capacity(LEN + TAG);
        body.extend_from_slice(&self.xid.to_be_bytes());
        body.extend_from_slice(self.job.as_bytes());
        body.extend_from_slice(&self.seq.to_be_bytes());
        let t = tag(workspace, &body);
        body.extend_from_slice(&t);
        URL_SAFE_NO_PAD.encode(body)
    }

    /// A cursor this server made for `workspace`; `None` for anything else.
    pub fn decode(text: &str, workspace: &str) -> Option<Cursor> {
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        if bytes.len() != LEN + TAG {
            return None;
        }
        let (body, t) = bytes.split_at(LEN);
        if tag(workspace, body) != t {
            return None;
        }
        let xid = i64::from_be_bytes(body[..8].try_into().ok()?);
        let job = Uuid::from_slice(&body[8..24]).ok()?;
        let seq = i32::from_be_bytes(body[24..28].try_into().ok()?);
        (xid >= 0 && seq >= 0).then_some(Cursor { xid, job, seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_in_its_workspace_only() {
        let c = Cursor {
            xid: 123_456,
            job: Uuid::now_v7(),
            seq: 7,
        };
        let text = c.encode("acme");
        assert_eq!(Cursor::decode(&text, "acme"), Some(c));
        assert_eq!(Cursor::decode(&text, "beta"), None);
        assert_eq!(Cursor::decode("garbage", "acme"), None);
        let mut garbled = text.into_bytes();
        garbled[3] = if garbled[3] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            Cursor::decode(&String::from_utf8(garbled).unwrap(), "acme"),
            None
        );
        assert!(
            Cursor::after_xid(5)
                > Cursor {
                    xid: 5,
                    job: Uuid::now_v7(),
                    seq: 9
                }
        );
    }
}
