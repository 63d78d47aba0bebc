// Command upstream-allocator allocates DRA claims with the real Kubernetes allocator
// (k8s.io/dynamic-resource-allocation/structured), the way kube-scheduler's
// DynamicResources plugin uses it, after kube-apiserver's defaulting and validation:
// the oracle of dra-jupyter's differential tests (tests/upstream/).
//
// Batch mode: standard input holds one JSON world per line,
//
//	{"objects": [DeviceClass | ResourceSlice | DeviceTaintRule | ResourceClaim | Node, ...], "node": "optional"}
//
// the objects as in a `dra-jupyter allocate -f` file (claims with status.allocation are
// in use, the others are allocated together). DeviceTaintRules reach the allocator as in
// kube-scheduler: through the ResourceSlice tracker (k8s.io/dynamic-resource-allocation/
// resourceslice/tracker, DRADeviceTaintRules on), fed by informers over a fake clientset
// holding the world's slices and rules; the allocator gets its patched slices. Standard output gets one JSON line per
// world, in order:
//
//	{"exit": 0, "node": "node-1", "items": [claim with status.allocation, ...]}
//	{"exit": 1, "error": "why no node fits"}
//	{"exit": 2, "error": "the first invalid object and field, or the allocator's error"}
//
// (a second DeviceClass, ResourceSlice or DeviceTaintRule of a name already given is
// invalid, as kube-apiserver refuses to create it)
//
// exit as `dra-jupyter allocate`'s exit code; items as its `-o json` List's items.
//
// Feature gates are kube-apiserver's and kube-scheduler's defaults for this Kubernetes
// version (k8s.io/kubernetes/pkg/features); --feature-gates=Name=bool,... changes them
// for both. --print-features prints the allocator's features and exits.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/apis/resource"
	resourceinstall "k8s.io/kubernetes/pkg/apis/resource/install"
	"k8s.io/kubernetes/pkg/apis/resource/validation"
	kubefeatures "k8s.io/kubernetes/pkg/features" // also registers the Kubernetes feature gates
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	sigsjson "sigs.k8s.io/json"
)

// filterTimeout is kube-scheduler's default DynamicResourcesArgs.filterTimeout.
const filterTimeout = 10 * time.Second

type world struct {
	Objects []json.RawMessage `json:"objects"`
	Node    string            `json:"node,omitempty"`
}

type answer struct {
	Exit  int              `json:"exit"`
	Node  string           `json:"node,omitempty"`
	Items []map[string]any `json:"items,omitempty"`
	Error string           `json:"error,omitempty"`
	// Nanoseconds from the allocated state to the answer (allocator built, nodes tried),
	// objects already decoded and admitted; only with --time.
	Nanoseconds int64 `json:"ns,omitempty"`
}

var scheme = runtime.NewScheme()

func init() {
	resourceinstall.Install(scheme)
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	c, ok := l[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, name)
	}
	return c, nil
}

type invalid struct{ msg string }

func (e invalid) Error() string { return e.msg }

func fieldErrors(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return invalid{fmt.Sprintf("%s %s is invalid: %s", kind, name, errs.ToAggregate().Error())}
}

// admit decodes one v1 object as kube-apiserver does (case-sensitive JSON, defaults of
// the v1 API), converts it to the internal version, validates it there as on create,
// and returns the v1 object converted back (what the API server would store).
func admit[V runtime.Object, I runtime.Object](raw []byte, external V, internal I, validate func(I) field.ErrorList, kind, name string) (V, error) {
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, external); err != nil {
		return external, invalid{fmt.Sprintf("%s %s: %v", kind, name, err)}
	}
	scheme.Default(external)
	if err := scheme.Convert(external, internal, nil); err != nil {
		return external, invalid{fmt.Sprintf("%s %s: %v", kind, name, err)}
	}
	if err := fieldErrors(kind, name, validate(internal)); err != nil {
		return external, err
	}
	if err := scheme.Convert(internal, external, nil); err != nil {
		return external, invalid{fmt.Sprintf("%s %s: %v", kind, name, err)}
	}
	return external, nil
}

type objects struct {
	classes   classLister
	slices    []*resourceapi.ResourceSlice
	rules     []*resourceapi.DeviceTaintRule
	pending   []*resourceapi.ResourceClaim
	pendingJS []map[string]any
	allocated []*resourceapi.ResourceClaim
	nodes     []*v1.Node
}

func load(w world) (*objects, error) {
	o := &objects{classes: classLister{}}
	// kube-apiserver keeps one object per name: a second create of a name already stored
	// is refused (AlreadyExists)
	sliceNames := sets.New[string]()
	ruleNames := sets.New[string]()
	for _, raw := range w.Objects {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Status struct {
				Allocation json.RawMessage `json:"allocation"`
			} `json:"status"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, invalid{err.Error()}
		}
		name := head.Metadata.Name
		switch head.Kind {
		case "DeviceClass":
			c, err := admit(raw, &resourceapi.DeviceClass{}, &resource.DeviceClass{}, validation.ValidateDeviceClass, "DeviceClass", name)
			if err != nil {
				return nil, err
			}
			if _, found := o.classes[c.Name]; found {
				return nil, invalid{fmt.Sprintf("DeviceClass %s: already exists", name)}
			}
			o.classes[c.Name] = c
		case "ResourceSlice":
			s, err := admit(raw, &resourceapi.ResourceSlice{}, &resource.ResourceSlice{}, validation.ValidateResourceSlice, "ResourceSlice", name)
			if err != nil {
				return nil, err
			}
			if sliceNames.Has(s.Name) {
				return nil, invalid{fmt.Sprintf("ResourceSlice %s: already exists", name)}
			}
			sliceNames.Insert(s.Name)
			o.slices = append(o.slices, s)
		case "DeviceTaintRule":
			r, err := admit(raw, &resourceapi.DeviceTaintRule{}, &resource.DeviceTaintRule{}, validation.ValidateDeviceTaintRule, "DeviceTaintRule", name)
			if err != nil {
				return nil, err
			}
			if ruleNames.Has(r.Name) {
				return nil, invalid{fmt.Sprintf("DeviceTaintRule %s: already exists", name)}
			}
			ruleNames.Insert(r.Name)
			o.rules = append(o.rules, r)
		case "ResourceClaim":
			if head.Metadata.Namespace == "" {
				// what `kubectl apply` does with no namespace in the object
				var m map[string]any
				_ = json.Unmarshal(raw, &m)
				md, _ := m["metadata"].(map[string]any)
				md["namespace"] = "default"
				raw, _ = json.Marshal(m)
				name = "default/" + name
			} else {
				name = head.Metadata.Namespace + "/" + name
			}
			allocation := head.Status.Allocation
			c, err := admit(raw, &resourceapi.ResourceClaim{}, &resource.ResourceClaim{}, validation.ValidateResourceClaim, "ResourceClaim", name)
			if err != nil {
				return nil, err
			}
			if len(allocation) > 0 && string(allocation) != "null" {
				// in use: its status as given (written by a scheduler, not validated here)
				var status resourceapi.ResourceClaimStatus
				if err := json.Unmarshal(raw, &struct {
					Status *resourceapi.ResourceClaimStatus `json:"status"`
				}{&status}); err != nil {
					return nil, invalid{fmt.Sprintf("ResourceClaim %s: status: %v", name, err)}
				}
				c.Status = status
				if c.UID == "" {
					c.UID = types.UID("uid-allocated-" + name)
				}
				o.allocated = append(o.allocated, c)
			} else {
				if c.UID == "" {
					c.UID = types.UID("uid-" + name)
				}
				var m map[string]any
				_ = json.Unmarshal(raw, &m)
				o.pending = append(o.pending, c)
				o.pendingJS = append(o.pendingJS, m)
			}
		case "Node":
			n := &v1.Node{}
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, n); err != nil {
				return nil, invalid{fmt.Sprintf("Node %s: %v", name, err)}
			}
			o.nodes = append(o.nodes, n)
		default:
			return nil, invalid{fmt.Sprintf("unknown kind %q", head.Kind)}
		}
	}
	sort.Slice(o.nodes, func(i, j int) bool { return o.nodes[i].Name < o.nodes[j].Name })
	return o, nil
}

// allocatedState is kube-scheduler's GatherAllocatedState over the claims in use
// (dynamicresources.foreachAllocatedDevice): admin-access results are not in use, shared
// results (a shareID) count by share and capacity when DRAConsumableCapacity is on.
func allocatedState(claims []*resourceapi.ResourceClaim, consumable bool) structured.AllocatedState {
	s := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID != nil {
				if consumable {
					s.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
					if r.ConsumedCapacity != nil {
						s.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
					}
					continue
				}
			}
			s.AllocatedDevices.Insert(id)
		}
	}
	return s
}

// patchedSlices is what kube-scheduler's allocator gets from its ResourceSlice tracker
// (dynamicresources: draManager.ResourceSlices().ListWithDeviceTaintRules()): the slices
// with the taints of the DeviceTaintRules that select their devices appended. The real
// tracker, on informers of a fake clientset holding the world's slices and rules, synced
// before it is read. Without rules the tracker gives the slices as they are (no patch).
func patchedSlices(ctx context.Context, o *objects, enabled bool) ([]*resourceapi.ResourceSlice, error) {
	if len(o.rules) == 0 || !enabled {
		return o.slices, nil
	}
	objs := make([]runtime.Object, 0, len(o.slices)+len(o.rules))
	for _, s := range o.slices {
		objs = append(objs, s)
	}
	for _, r := range o.rules {
		objs = append(objs, r)
	}
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewSimpleClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	t, err := tracker.StartTracker(ctx, tracker.Options{
		EnableDeviceTaintRules: true,
		SliceInformer:          factory.Resource().V1().ResourceSlices(),
		TaintInformer:          factory.Resource().V1().DeviceTaintRules(),
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start the ResourceSlice tracker: %w", err)
	}
	factory.Start(ctx.Done())
	defer func() {
		// in this order: the informers stop once the context is done, and Shutdown waits
		// for them
		t.Stop()
		cancel()
		factory.Shutdown()
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !t.HasSynced() {
		if time.Now().After(deadline) {
			return nil, errors.New("the ResourceSlice tracker did not sync in 30s")
		}
		time.Sleep(100 * time.Microsecond)
	}
	patched, err := t.ListPatchedResourceSlices()
	if err != nil {
		return nil, err
	}
	if len(patched) != len(o.slices) {
		return nil, fmt.Errorf("the ResourceSlice tracker lists %d slices of %d", len(patched), len(o.slices))
	}
	// in the order given, as without rules (the allocator's answer does not depend on it)
	byName := make(map[string]*resourceapi.ResourceSlice, len(patched))
	for _, s := range patched {
		byName[s.Name] = s
	}
	out := make([]*resourceapi.ResourceSlice, len(o.slices))
	for i, s := range o.slices {
		out[i] = byName[s.Name]
	}
	return out, nil
}

// elapsed is how long the last run took from its allocated state on (one world at a time).
var elapsed time.Duration

func run(ctx context.Context, w world, features structured.Features, celCache *cel.Cache) answer {
	o, err := load(w)
	if err != nil {
		return answer{Exit: 2, Error: err.Error()}
	}
	if len(o.pending) == 0 {
		return answer{Exit: 0, Items: []map[string]any{}}
	}
	// PreFilter's class check
	check := func(claim *resourceapi.ResourceClaim, className, request string) *answer {
		if className == "" {
			return &answer{Exit: 2, Error: fmt.Sprintf("request %s: unsupported request type", request)}
		}
		if _, err := o.classes.Get(className); err != nil {
			return &answer{Exit: 1, Error: fmt.Sprintf("request %s: device class %s does not exist", request, className)}
		}
		return nil
	}
	for _, claim := range o.pending {
		for _, r := range claim.Spec.Devices.Requests {
			switch {
			case r.Exactly != nil:
				if a := check(claim, r.Exactly.DeviceClassName, r.Name); a != nil {
					return *a
				}
			case len(r.FirstAvailable) > 0:
				for _, sub := range r.FirstAvailable {
					if a := check(claim, sub.DeviceClassName, r.Name+"/"+sub.Name); a != nil {
						return *a
					}
				}
			default:
				return answer{Exit: 1, Error: fmt.Sprintf("resource claim %s, request %s: unknown request type", claim.Name, r.Name)}
			}
		}
	}
	slices, err := patchedSlices(ctx, o, utilfeature.DefaultFeatureGate.Enabled(kubefeatures.DRADeviceTaintRules))
	if err != nil {
		return answer{Exit: 4, Error: err.Error()}
	}
	start := time.Now()
	defer func() { elapsed = time.Since(start) }()
	state := allocatedState(o.allocated, features.ConsumableCapacity)
	allocator, err := structured.NewAllocator(ctx, features, state, o.classes, slices, celCache)
	if err != nil {
		return answer{Exit: 2, Error: err.Error()}
	}
	var reasons []string
	for _, node := range o.nodes {
		if w.Node != "" && node.Name != w.Node {
			continue
		}
		nodeCtx, cancel := context.WithTimeout(ctx, filterTimeout)
		results, err := allocator.Allocate(nodeCtx, node, o.pending)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return answer{Exit: 2, Error: fmt.Sprintf("node %s: timed out trying to allocate devices", node.Name)}
		case errors.Is(err, structured.ErrFailedAllocationOnNode):
			reasons = append(reasons, fmt.Sprintf("node %s: %v", node.Name, err))
			continue
		case err != nil:
			return answer{Exit: 2, Error: err.Error()}
		}
		if len(results) != len(o.pending) {
			reasons = append(reasons, fmt.Sprintf("node %s: cannot allocate all claims", node.Name))
			continue
		}
		items := make([]map[string]any, len(results))
		for i, result := range results {
			encoded, err := json.Marshal(result)
			if err != nil {
				return answer{Exit: 4, Error: err.Error()}
			}
			var allocation map[string]any
			_ = json.Unmarshal(encoded, &allocation)
			item := o.pendingJS[i]
			status, _ := item["status"].(map[string]any)
			if status == nil {
				status = map[string]any{}
			}
			status["allocation"] = allocation
			item["status"] = status
			items[i] = item
		}
		return answer{Exit: 0, Node: node.Name, Items: items}
	}
	return answer{Exit: 1, Error: "no node fits: " + strings.Join(reasons, "; ")}
}

func main() {
	gates := flag.String("feature-gates", "", "Name=true|false,... over the Kubernetes defaults")
	printFeatures := flag.Bool("print-features", false, "print the allocator's features and exit")
	timed := flag.Bool("time", false, "add each answer's allocation time (ns)")
	repeat := flag.Int("repeat", 1, "allocate each world this many times (a fresh allocator each time); the answer is the last, ns the median")
	flag.Parse()
	klog.SetOutput(os.Stderr)
	if *gates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(*gates); err != nil {
			fmt.Fprintln(os.Stderr, "upstream-allocator:", err)
			os.Exit(2)
		}
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	features := dynamicresources.AllocatorFeatures(fts)
	if *printFeatures {
		encoded, _ := json.Marshal(features)
		fmt.Println(string(encoded))
		return
	}
	celCache := cel.NewCache(10, cel.Features{
		EnableConsumableCapacity: fts.EnableDRAConsumableCapacity,
		EnableListTypeAttributes: fts.EnableDRAListTypeAttributes,
	})
	ctx := context.Background()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<30)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		line := in.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var w world
		var a answer
		if err := json.Unmarshal(line, &w); err != nil {
			a = answer{Exit: 2, Error: "world: " + err.Error()}
		} else {
			times := make([]time.Duration, 0, *repeat)
			for i := 0; i < max(*repeat, 1); i++ {
				elapsed = 0
				a = run(ctx, w, features, celCache)
				times = append(times, elapsed)
			}
			if *timed {
				sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
				a.Nanoseconds = times[len(times)/2].Nanoseconds()
			}
		}
		encoded, _ := json.Marshal(a)
		out.Write(encoded)
		out.WriteByte('\n')
		out.Flush()
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "upstream-allocator:", err)
		os.Exit(2)
	}
}
