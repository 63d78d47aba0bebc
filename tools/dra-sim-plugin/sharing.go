package main

// A claim's opaque config for this driver, decoded as NVIDIA's driver decodes it
// (api/nvidia.com/resource/v1beta1 of kubernetes-sigs/dra-driver-nvidia-gpu: GpuConfig,
// MigDeviceConfig; strict: an unknown or duplicate field is an error, and so is a kind that
// does not fit the device), and the variables its sharing settings give the container.
//
// What a container sees:
//   - MPS (as the real driver): CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps, the pipe of the
//     claim's MPS control daemon. The real driver sets the thread percentage and the pinned
//     memory limit on that daemon (set_default_active_thread_percentage,
//     set_default_device_pinned_mem_limit); with no daemon here, the simulated driver hands
//     them to the container as the client-side variables CUDA reads for the same limits:
//     CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<percent> and
//     CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<uuid>=<MiB>M[,<uuid>=<MiB>M...] (whole MiB, at least 1).
//   - TimeSlicing: the real driver runs `nvidia-smi compute-policy --set-timeslice`, which no
//     container sees; simulated: DRA_SIM_TIMESLICE_INTERVAL=<Default|Short|Medium|Long>.
//   - Either: DRA_SIM_SHARING_STRATEGY=<TimeSlicing|MPS> (simulated), so that a test can
//     read what the driver was told.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	sigsjson "sigs.k8s.io/json"
)

const (
	configAPIVersion = "resource.nvidia.com/v1beta1"
	gpuConfigKind    = "GpuConfig"
	migConfigKind    = "MigDeviceConfig"
	mpsPipeDirectory = "/tmp/nvidia-mps" // the real driver's, in the container
)

type typeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

type timeSlicingConfig struct {
	Interval *string `json:"interval,omitempty"`
}

type mpsConfig struct {
	DefaultActiveThreadPercentage     *int                         `json:"defaultActiveThreadPercentage,omitempty"`
	DefaultPinnedDeviceMemoryLimit    *resource.Quantity           `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
	MultiUser                         bool                         `json:"multiUser,omitempty"`
}

// GpuConfig's sharing.
type gpuSharing struct {
	Strategy          string             `json:"strategy"`
	TimeSlicingConfig *timeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *mpsConfig         `json:"mpsConfig,omitempty"`
}

// MigDeviceConfig's sharing: no timeSlicingConfig.
type migSharing struct {
	Strategy  string     `json:"strategy"`
	MpsConfig *mpsConfig `json:"mpsConfig,omitempty"`
}

type gpuConfig struct {
	typeMeta `json:",inline"`
	Sharing  *gpuSharing `json:"sharing,omitempty"`
}

type migDeviceConfig struct {
	typeMeta `json:",inline"`
	Sharing  *migSharing `json:"sharing,omitempty"`
}

// sharing is a request's decoded sharing: nil when it has none.
type sharing struct {
	strategy string
	interval string
	mps      *mpsConfig
}

var intervals = map[string]bool{"Default": true, "Short": true, "Medium": true, "Long": true}

// decodeStrict decodes data into v as the real driver's strict decoder does.
func decodeStrict(data []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(data, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		messages := make([]string, len(strict))
		for i, e := range strict {
			messages[i] = e.Error()
		}
		return fmt.Errorf("strict decoding error: %s", strings.Join(messages, ", "))
	}
	return nil
}

// decodeConfig decodes one opaque config's parameters for devices of type deviceType (gpu,
// mig).
func decodeConfig(raw []byte, deviceType string) (*sharing, error) {
	var meta typeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &meta); err != nil {
		return nil, err
	}
	if meta.APIVersion != configAPIVersion {
		return nil, fmt.Errorf("unsupported apiVersion %q (want %s)", meta.APIVersion, configAPIVersion)
	}
	want := gpuConfigKind
	if deviceType == "mig" {
		want = migConfigKind
	}
	if meta.Kind != gpuConfigKind && meta.Kind != migConfigKind {
		return nil, fmt.Errorf("unsupported kind %q (want %s or %s)", meta.Kind, gpuConfigKind, migConfigKind)
	}
	if meta.Kind != want {
		return nil, fmt.Errorf("cannot apply %s to a %s device (want %s)", meta.Kind, deviceType, want)
	}
	var out sharing
	if meta.Kind == gpuConfigKind {
		var config gpuConfig
		if err := decodeStrict(raw, &config); err != nil {
			return nil, err
		}
		if config.Sharing == nil {
			return nil, nil
		}
		out = sharing{strategy: config.Sharing.Strategy, mps: config.Sharing.MpsConfig}
		if config.Sharing.TimeSlicingConfig != nil {
			if config.Sharing.Strategy != "TimeSlicing" {
				return nil, errors.New("timeSlicingConfig is set but the strategy is not TimeSlicing")
			}
			if config.Sharing.TimeSlicingConfig.Interval != nil {
				out.interval = *config.Sharing.TimeSlicingConfig.Interval
			}
		}
	} else {
		var config migDeviceConfig
		if err := decodeStrict(raw, &config); err != nil {
			return nil, err
		}
		if config.Sharing == nil {
			return nil, nil
		}
		out = sharing{strategy: config.Sharing.Strategy, mps: config.Sharing.MpsConfig}
	}
	if err := out.validate(); err != nil {
		return nil, err
	}
	return &out, nil
}

func (s *sharing) validate() error {
	switch s.strategy {
	case "TimeSlicing":
		if s.mps != nil {
			return errors.New("mpsConfig is set but the strategy is not MPS")
		}
		if s.interval == "" {
			s.interval = "Default"
		}
		if !intervals[s.interval] {
			return fmt.Errorf("unknown time-slice interval %q (want Default, Short, Medium or Long)", s.interval)
		}
	case "MPS":
		if s.mps == nil {
			return nil
		}
		if p := s.mps.DefaultActiveThreadPercentage; p != nil && (*p < 0 || *p > 100) {
			return fmt.Errorf("defaultActiveThreadPercentage %d is not between 0 and 100", *p)
		}
		if q := s.mps.DefaultPinnedDeviceMemoryLimit; q != nil && q.Value() < 0 {
			return fmt.Errorf("defaultPinnedDeviceMemoryLimit %s is negative", q.String())
		}
	default:
		return fmt.Errorf("unknown GPU sharing strategy %q (want TimeSlicing or MPS)", s.strategy)
	}
	return nil
}

// applies says whether a config entry for requests applies to the allocation result of
// request (a request, or request/subrequest): an empty list applies to all.
func applies(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	for _, r := range requests {
		if r == request || r == resourceclaim.BaseRequestRef(request) {
			return true
		}
	}
	return false
}

// requestSharing is the sharing of one request's devices: the last of the configs for this
// driver that apply to it, the class's before the claim's (the claim's win). Every config
// that applies is decoded, and any error fails the prepare, as in the real driver.
func (p *plugin) requestSharing(claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult, types []string) (*sharing, error) {
	deviceType := "gpu"
	for _, t := range types {
		if t == "mig" {
			deviceType = "mig"
		}
	}
	var chosen *sharing
	origin := map[resourceapi.AllocationConfigSource]string{
		resourceapi.AllocationConfigSourceClass: "device class",
		resourceapi.AllocationConfigSourceClaim: "claim",
	}
	for _, source := range []resourceapi.AllocationConfigSource{resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim} {
		for i, config := range claim.Status.Allocation.Devices.Config {
			if config.Source != source || config.Opaque == nil || config.Opaque.Driver != p.driverName {
				continue
			}
			if !applies(config.Requests, results[0].Request) {
				continue
			}
			decoded, err := decodeConfig(config.Opaque.Parameters.Raw, deviceType)
			if err != nil {
				return nil, fmt.Errorf("error decoding config parameters (config %d, from the %s): %w", i, origin[source], err)
			}
			if decoded != nil {
				chosen = decoded
			}
		}
	}
	return chosen, nil
}

// sharingEnv is the container's variables for s (none when nil); uuids: the request's
// devices.
func sharingEnv(s *sharing, uuids []string) []string {
	if s == nil {
		return nil
	}
	env := []string{"DRA_SIM_SHARING_STRATEGY=" + s.strategy}
	if s.strategy == "TimeSlicing" {
		return append(env, "DRA_SIM_TIMESLICE_INTERVAL="+s.interval)
	}
	env = append(env, "CUDA_MPS_PIPE_DIRECTORY="+mpsPipeDirectory)
	if s.mps == nil {
		return env
	}
	if p := s.mps.DefaultActiveThreadPercentage; p != nil {
		env = append(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+strconv.Itoa(*p))
	}
	var limits []string
	for _, uuid := range uuids {
		limit := s.mps.DefaultPinnedDeviceMemoryLimit
		if perDevice, ok := s.mps.DefaultPerDevicePinnedMemoryLimit[uuid]; ok {
			limit = &perDevice
		}
		if limit == nil {
			continue
		}
		mib := limit.Value() / (1 << 20) // whole MiB, at least one, as the real driver
		if mib < 1 {
			mib = 1
		}
		limits = append(limits, fmt.Sprintf("%s=%dM", uuid, mib))
	}
	if len(limits) > 0 {
		env = append(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+strings.Join(limits, ","))
	}
	return env
}
