//! The `user_data` of every operation a core submits: what the operation is, whose it is, and a
//! small operand, packed in 64 bits so a completion finds its owner without a lookup table.
//!
//! ```text
//! bits  0..8   kind (OP_*)
//! bits  8..24  aux: a registered buffer index, a splice's place in its chain, ...
//! bits 24..48  connection slot (0 for the core's own operations)
//! bits 48..64  the slot's generation, low 16 bits
//! ```

use super::mailbox::ConnId;

/// The core's multishot `ACCEPT` on its listening socket.
pub(crate) const OP_ACCEPT: u8 = 1;
/// The core's multishot `POLL_ADD` on its mailbox's eventfd.
pub(crate) const OP_WAKE: u8 = 2;
/// A connection's multishot `RECV` (provided buffers).
pub(crate) const OP_RECV: u8 = 3;
/// A `SEND` of response bytes (aux: the registered buffer, or 0 for bytes in memory).
pub(crate) const OP_SEND: u8 = 4;
/// A `READ_FIXED` of file bytes into a registered buffer (aux: the buffer).
pub(crate) const OP_READ: u8 = 5;
/// A `SEND_ZC` from a registered buffer (aux: the buffer): a result completion, then a
/// notification (`IORING_CQE_F_NOTIF`) when the kernel no longer needs the buffer.
pub(crate) const OP_SEND_ZC: u8 = 6;
/// One `SPLICE` of a linked chain (aux: its index in the chain).
pub(crate) const OP_SPLICE: u8 = 7;
/// An `ASYNC_CANCEL` (its result is only logged).
pub(crate) const OP_CANCEL: u8 = 8;
/// A one-shot `POLL_ADD` for `POLLOUT` on a connection's socket: a non-blocking pipe -> socket
/// splice met a full socket (`EAGAIN`), and the `uring-splice` transfer waits for room.
pub(crate) const OP_POLL_OUT: u8 = 9;

/// A decoded `user_data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpTag {
    /// `OP_*`.
    pub(crate) kind: u8,
    /// The operand.
    pub(crate) aux: u16,
    /// Connection slot (0 for the core's own operations).
    pub(crate) slot: u32,
    /// Low 16 bits of the slot's generation.
    pub(crate) generation: u16,
}

/// The `user_data` of an operation of connection `conn` (or the core's own, `None`).
pub(crate) fn tag(kind: u8, conn: Option<ConnId>, aux: u16) -> u64 {
    let (slot, generation) = conn.map_or((0, 0), |c| (c.slot, c.generation));
    u64::from(kind) | u64::from(aux) << 8 | u64::from(slot & 0xff_ffff) << 24 | u64::from(generation & 0xffff) << 48
}

/// Unpacks a `user_data` made by [`tag`].
pub(crate) fn untag(user_data: u64) -> OpTag {
    OpTag {
        kind: (user_data & 0xff) as u8,
        aux: ((user_data >> 8) & 0xffff) as u16,
        slot: ((user_data >> 24) & 0xff_ffff) as u32,
        generation: (user_data >> 48) as u16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        let conn = ConnId { slot: 0x12_3456, generation: 0x1_abcd };
        let t = untag(tag(OP_SPLICE, Some(conn), 0xbeef));
        assert_eq!(t, OpTag { kind: OP_SPLICE, aux: 0xbeef, slot: 0x12_3456, generation: 0xabcd });
        assert_eq!(untag(tag(OP_ACCEPT, None, 0)), OpTag { kind: OP_ACCEPT, aux: 0, slot: 0, generation: 0 });
    }
}
