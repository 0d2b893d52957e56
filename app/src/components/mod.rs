//! Pieces the pages share.

pub mod arguments;
pub mod clock;
pub mod copy;
pub mod header;
pub mod live;
pub mod name;
pub mod notify;
pub mod when;
