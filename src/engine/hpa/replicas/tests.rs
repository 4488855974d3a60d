//! Unit tests of the replica calculator's edge arithmetic.

use super::*;
