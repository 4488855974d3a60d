//! Controller settings: the kube-controller-manager flags that Kubernetes only allows
//! cluster-wide. autoscaled passes them with every evaluation so that each target may
//! override them. Defaults are Kubernetes' (`pkg/controller/podautoscaler/config/v1alpha1/defaults.go`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Settings of one evaluation. `Default` gives the Kubernetes 1.37 controller's defaults
/// (flags and feature gates).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// `--horizontal-pod-autoscaler-tolerance` (0.1): usage ratios within 1 ± tolerance cause
    /// no scaling. `behavior.scale_{up,down}.tolerance` override it per direction (KEP-4951).
    pub tolerance: f64,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period` (5 min): while a pod is this
    /// young, its CPU samples are distrusted unless it is ready with a full sample window.
    pub cpu_initialization_period: Duration,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay` (30 s): a pod that turned unready
    /// within this delay after starting is taken as never ready.
    pub initial_readiness_delay: Duration,
    /// `--horizontal-pod-autoscaler-downscale-stabilization` (5 min): the legacy path's
    /// downscale window, and the default `behavior.scale_down.stabilization_window_seconds`.
    pub downscale_stabilization: Duration,
    /// Legacy scale-up limit factor (`scaleUpLimitFactor`, 2.0): the legacy path never scales
    /// above `max(factor × current, minimum)`.
    pub scale_up_limit_factor: f64,
    /// Legacy scale-up limit minimum (`scaleUpLimitMinimum`, 4.0).
    pub scale_up_limit_minimum: f64,
    /// The `HPAScaleToZero` feature gate (beta and on by default in Kubernetes 1.37; off in
    /// 1.36): `min_replicas: 0` is admitted with an Object or External metric, the
    /// `ScaledToZero` condition is kept, and a target at 0 that the controller did not scale
    /// to zero is left alone (`reconcileAutoscaler`, `shouldComputeMetricsForZeroReplicas`).
    /// A gate, not a flag, in Kubernetes; per target here like every other setting.
    #[serde(default)]
    pub scale_to_zero: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
            downscale_stabilization: Duration::from_secs(300),
            scale_up_limit_factor: 2.0,
            scale_up_limit_minimum: 4.0,
            scale_to_zero: true,
        }
    }
}
