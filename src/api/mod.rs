//! The gRPC API: thin tonic handlers over the engine and the store.
//!
//! * [`convert`]: proto ↔ engine, validating every field with its proto path;
//! * [`status`]: the one error → `tonic::Status` table;
//! * [`horizontal`]: the `HorizontalAutoscaler` service;
//! * [`vertical`]: the `VerticalAutoscaler` service (conversion in `convert::vertical`).
//!
//! Only this layer reads the clock, once per request, and passes `now` down.

pub mod convert;
pub mod horizontal;
pub mod simulate;
pub mod status;
pub mod vertical;

pub use horizontal::{HorizontalService, ServiceOptions};
pub use vertical::{VerticalOptions, VerticalService};
