//! Proto ↔ engine conversion (filled in next).
