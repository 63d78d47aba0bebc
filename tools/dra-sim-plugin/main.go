// Command dra-sim-plugin is dra-jupyter's simulated GPU driver: a DRA kubelet plugin that
// speaks the real kubelet plugin protocol (k8s.io/dynamic-resource-allocation/kubeletplugin)
// for hardware that is not there.
//
// It registers with the kubelet as one driver (gpu.nvidia.com by default), publishes the
// node's ResourceSlices itself from a JSON file that the test environment writes from a
// simulated inventory, and prepares a claim the way NVIDIA's driver does as far as a
// container can see: a CDI spec per claim and request whose edits set NVIDIA_VISIBLE_DEVICES
// and CUDA_VISIBLE_DEVICES to the allocated devices' UUIDs (their "uuid" attribute). The GPU
// hardware is the only simulated part: no device nodes are injected.
//
// A claim's opaque config for this driver (NVIDIA's GpuConfig or MigDeviceConfig,
// resource.nvidia.com/v1beta1; see sharing.go) is decoded strictly, as the real driver
// does: an unknown field, a wrong kind or a value out of range fails the prepare with the
// reason, which the kubelet shows in the pod's events. Its sharing settings become the
// variables the container sees (sharing.go says which are NVIDIA's and which simulated).
//
//	dra-sim-plugin --kubeconfig K --node-name N --resources R.json --cdi-dir D \
//	    --plugin-dir P --registrar-dir G [--driver-name gpu.nvidia.com]
//
// The resources file: {"pools": {"<pool>": {"slices": [{"devices": [<resource.k8s.io/v1
// Device>...], "sharedCounters": [...]}]}}}. SIGTERM or SIGINT stops the plugin; it then
// removes the ResourceSlices it published.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// CDI kind of the specs this driver writes (NVIDIA's driver uses the same one).
const cdiKind = "k8s.gpu.nvidia.com/claim"

type resourcesFile struct {
	Pools map[string]struct {
		Slices []struct {
			Devices        []resourceapi.Device     `json:"devices"`
			SharedCounters []resourceapi.CounterSet `json:"sharedCounters,omitempty"`
		} `json:"slices"`
	} `json:"pools"`
}

type cdiSpec struct {
	CDIVersion string      `json:"cdiVersion"`
	Kind       string      `json:"kind"`
	Devices    []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string `json:"name"`
	ContainerEdits struct {
		Env []string `json:"env"`
	} `json:"containerEdits"`
}

type plugin struct {
	driverName string
	cdiDir     string
	uuids      map[string]string // "<pool>/<device>" -> the device's uuid attribute
	types      map[string]string // "<pool>/<device>" -> the device's type attribute (gpu, mig)
	mutex      sync.Mutex
}

var _ kubeletplugin.DRAPlugin = &plugin{}

func loadResources(path, driverName string) (resourceslice.DriverResources, map[string]string, map[string]string, error) {
	var file resourcesFile
	data, err := os.ReadFile(path)
	if err != nil {
		return resourceslice.DriverResources{}, nil, nil, err
	}
	decoder := json.NewDecoder(strings.NewReader(string(data)))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&file); err != nil {
		return resourceslice.DriverResources{}, nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	uuids := map[string]string{}
	types := map[string]string{}
	for poolName, pool := range file.Pools {
		var slices []resourceslice.Slice
		for _, s := range pool.Slices {
			slices = append(slices, resourceslice.Slice{Devices: s.Devices, SharedCounters: s.SharedCounters})
			for _, device := range s.Devices {
				uuid, ok := device.Attributes["uuid"]
				if !ok {
					uuid, ok = device.Attributes[resourceapi.QualifiedName(driverName+"/uuid")]
				}
				if ok && uuid.StringValue != nil {
					uuids[poolName+"/"+device.Name] = *uuid.StringValue
				}
				kind, ok := device.Attributes["type"]
				if ok && kind.StringValue != nil {
					types[poolName+"/"+device.Name] = *kind.StringValue
				}
			}
		}
		resources.Pools[poolName] = resourceslice.Pool{Slices: slices}
	}
	return resources, uuids, types, nil
}

var unsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// specPath is where the CDI spec of a claim's request goes; request "*" gives the glob of
// all the claim's specs.
func (p *plugin) specPath(claimUID types.UID, request string) string {
	if request != "*" {
		request = unsafe.ReplaceAllString(request, "_")
	}
	name := fmt.Sprintf("%s_%s_%s.json", strings.ReplaceAll(cdiKind, "/", "-"), claimUID, request)
	return filepath.Join(p.cdiDir, name)
}

func (p *plugin) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s: not allocated", claim.Namespace, claim.Name)
	}
	// Results by request, in the allocation's order: one CDI device per request.
	type group struct {
		results []resourceapi.DeviceRequestAllocationResult
		uuids   []string
		types   []string
	}
	var order []string
	groups := map[string]*group{}
	for _, result := range claim.Status.Allocation.Devices.Results {
		if result.Driver != p.driverName {
			continue
		}
		uuid, ok := p.uuids[result.Pool+"/"+result.Device]
		if !ok {
			return nil, fmt.Errorf("claim %s/%s: device %s/%s is not one this driver published", claim.Namespace, claim.Name, result.Pool, result.Device)
		}
		request := resourceclaim.BaseRequestRef(result.Request)
		g, seen := groups[request]
		if !seen {
			g = &group{}
			groups[request] = g
			order = append(order, request)
		}
		g.results = append(g.results, result)
		g.uuids = append(g.uuids, uuid)
		g.types = append(g.types, p.types[result.Pool+"/"+result.Device])
	}
	var devices []kubeletplugin.Device
	for _, request := range order {
		g := groups[request]
		visible := strings.Join(g.uuids, ",")
		sharing, err := p.requestSharing(claim, g.results, g.types)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s, request %s: %w", claim.Namespace, claim.Name, request, err)
		}
		device := cdiDevice{Name: fmt.Sprintf("%s-%s", claim.UID, unsafe.ReplaceAllString(request, "_"))}
		device.ContainerEdits.Env = []string{"NVIDIA_VISIBLE_DEVICES=" + visible, "CUDA_VISIBLE_DEVICES=" + visible}
		device.ContainerEdits.Env = append(device.ContainerEdits.Env, sharingEnv(sharing, g.uuids)...)
		sort.Strings(device.ContainerEdits.Env)
		spec := cdiSpec{CDIVersion: "0.6.0", Kind: cdiKind, Devices: []cdiDevice{device}}
		data, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		path := p.specPath(claim.UID, request)
		if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
			return nil, fmt.Errorf("claim %s/%s: write CDI spec: %w", claim.Namespace, claim.Name, err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return nil, fmt.Errorf("claim %s/%s: write CDI spec: %w", claim.Namespace, claim.Name, err)
		}
		for i, result := range g.results {
			prepared := kubeletplugin.Device{
				PoolName:   result.Pool,
				DeviceName: result.Device,
				ShareID:    result.ShareID,
				Requests:   []string{result.Request},
			}
			if i == 0 { // the request's CDI device carries all of its devices' UUIDs
				prepared.CDIDeviceIDs = []string{cdiKind + "=" + device.Name}
			}
			devices = append(devices, prepared)
		}
	}
	return devices, nil
}

func (p *plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	results := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		devices, err := p.prepare(claim)
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
		klog.FromContext(ctx).Info("prepared", "claim", klog.KObj(claim), "devices", devices, "err", err)
	}
	return results, nil
}

func (p *plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	results := map[types.UID]error{}
	for _, claim := range claims {
		matches, err := filepath.Glob(p.specPath(claim.UID, "*"))
		for _, path := range matches {
			if removeErr := os.Remove(path); removeErr != nil && !errors.Is(removeErr, os.ErrNotExist) {
				err = removeErr
			}
		}
		results[claim.UID] = err
		klog.FromContext(ctx).Info("unprepared", "claim", claim.String(), "err", err)
	}
	return results, nil
}

func (p *plugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// WatchHealthStatus: the simulated devices report no health (the health service is off).
func (p *plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig of the plugin's client")
	nodeName := flag.String("node-name", "", "the node this plugin runs on")
	driverName := flag.String("driver-name", "gpu.nvidia.com", "the DRA driver's name")
	resourcesPath := flag.String("resources", "", "the JSON file of the pools to publish")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "where the CDI specs of prepared claims go")
	pluginDir := flag.String("plugin-dir", "", "the plugin's socket directory (default: the kubelet's plugins dir)")
	registrarDir := flag.String("registrar-dir", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory")
	flag.Parse()
	if err := run(*kubeconfig, *nodeName, *driverName, *resourcesPath, *cdiDir, *pluginDir, *registrarDir); err != nil {
		fmt.Fprintf(os.Stderr, "dra-sim-plugin: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, nodeName, driverName, resourcesPath, cdiDir, pluginDir, registrarDir string) error {
	if nodeName == "" || resourcesPath == "" {
		return errors.New("--node-name and --resources are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	resources, uuids, types, err := loadResources(resourcesPath, driverName)
	if err != nil {
		return fmt.Errorf("resources: %w", err)
	}
	if pluginDir == "" {
		pluginDir = filepath.Join(kubeletplugin.KubeletPluginsDir, driverName)
	}
	for _, dir := range []string{cdiDir, pluginDir, registrarDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	p := &plugin{driverName: driverName, cdiDir: cdiDir, uuids: uuids, types: types}
	helper, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(nodeName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.RegistrarDirectoryPath(registrarDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if err := helper.PublishResources(ctx, resources); err != nil {
		helper.Stop()
		return fmt.Errorf("publish resources: %w", err)
	}
	klog.Info("dra-sim-plugin: started", "driver", driverName, "node", nodeName, "devices", len(uuids))
	<-ctx.Done()
	helper.Stop()
	return nil
}
