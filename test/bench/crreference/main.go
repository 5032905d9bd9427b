// A controller-runtime reference for the converged BackupCheck reconcile (issue 11: "converged reconcile
// CPU ≤ a controller-runtime Go implementation of the same reconciler on the same machine"). A benchmark,
// not product code: test/bench/reconcile-vs-go.ts builds it (cached outside the clone) and runs it
// against the same API server and the same converged checks as fleetcheck's engine.
//
// It reconciles BackupChecks the way fleetcheck does once they are converged: the check and its Jobs
// from the manager's caches (Jobs by an owner-uid field index), the spec's hash (sha256 over canonical
// JSON of backup, jobTemplate, timeout, validation), runs newer than lastRun, the due run of an
// unscheduled check (g<generation>), the history to prune, Verified set on a copy of the status, and
// a status write only when it differs (there is none when converged: the bench checks resourceVersions).
// Scheduled checks, Job creation and verdicts are not implemented: it is the converged path only, and a
// check it cannot decide is counted as "undecided", never written.
//
// It lists the namespace's checks once its caches synced, then enqueues every check ROUNDS times (each
// round after the previous one finished) through a channel source, and prints one JSON line: reconciles,
// wall seconds, process CPU seconds (user+system) over the rounds, writes, undecided, errors.
//
//	crreference -namespace NS -rounds R -workers W   (KUBECONFIG selects the API server)
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

var groupVersion = schema.GroupVersion{Group: "fleetcheck.io", Version: "v1alpha1"}

const (
	finalizerName = "fleetcheck.io/cleanup"
	labelRun      = "fleetcheck.io/run"
	labelPhase    = "fleetcheck.io/phase"
	ownerUIDIndex = "owner-uid"
)

// ---- the API types (the fields the converged reconcile reads) ----------------------------------------

type Backup struct {
	Name     string `json:"name"`
	Source   string `json:"source,omitempty"`
	Checksum string `json:"checksum,omitempty"`
}

type BackupCheckSpec struct {
	Backup                     Backup          `json:"backup"`
	JobTemplate                json.RawMessage `json:"jobTemplate"`
	Validation                 json.RawMessage `json:"validation,omitempty"`
	Schedule                   string          `json:"schedule,omitempty"`
	TimeZone                   string          `json:"timeZone,omitempty"`
	Timeout                    string          `json:"timeout,omitempty"`
	MaxStaleness               string          `json:"maxStaleness,omitempty"`
	Suspend                    bool            `json:"suspend,omitempty"`
	SuccessfulRunsHistoryLimit *int32          `json:"successfulRunsHistoryLimit,omitempty"`
	FailedRunsHistoryLimit     *int32          `json:"failedRunsHistoryLimit,omitempty"`
	ConcurrencyPolicy          string          `json:"concurrencyPolicy,omitempty"`
}

type Run struct {
	JobName        string          `json:"jobName"`
	RunID          string          `json:"runID"`
	BackupName     string          `json:"backupName,omitempty"`
	StartTime      string          `json:"startTime"`
	CompletionTime string          `json:"completionTime,omitempty"`
	Result         string          `json:"result"`
	TraceID        string          `json:"traceID,omitempty"`
	SpecHash       string          `json:"specHash,omitempty"`
	Phases         json.RawMessage `json:"phases,omitempty"`
}

type BackupCheckStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	LastRun            *Run               `json:"lastRun,omitempty"`
	LastSuccessfulTime string             `json:"lastSuccessfulTime,omitempty"`
	NextRunTime        string             `json:"nextRunTime,omitempty"`
	History            []Run              `json:"history,omitempty"`
}

type BackupCheck struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              BackupCheckSpec   `json:"spec"`
	Status            BackupCheckStatus `json:"status,omitempty"`
}

type BackupCheckList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackupCheck `json:"items"`
}

// Deep copies as controller-gen would write them (the cache hands each Get a copy).
func (r *Run) deepCopy() *Run {
	out := *r
	out.Phases = append(json.RawMessage(nil), r.Phases...)
	return &out
}

func (in *BackupCheck) DeepCopyInto(out *BackupCheck) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = in.Spec
	out.Spec.JobTemplate = append(json.RawMessage(nil), in.Spec.JobTemplate...)
	out.Spec.Validation = append(json.RawMessage(nil), in.Spec.Validation...)
	if in.Spec.SuccessfulRunsHistoryLimit != nil {
		v := *in.Spec.SuccessfulRunsHistoryLimit
		out.Spec.SuccessfulRunsHistoryLimit = &v
	}
	if in.Spec.FailedRunsHistoryLimit != nil {
		v := *in.Spec.FailedRunsHistoryLimit
		out.Spec.FailedRunsHistoryLimit = &v
	}
	out.Status = in.Status
	if in.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(in.Status.Conditions))
		for i := range in.Status.Conditions {
			in.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
	if in.Status.LastRun != nil {
		out.Status.LastRun = in.Status.LastRun.deepCopy()
	}
	if in.Status.History != nil {
		out.Status.History = make([]Run, len(in.Status.History))
		for i := range in.Status.History {
			out.Status.History[i] = *in.Status.History[i].deepCopy()
		}
	}
}

func (in *BackupCheck) DeepCopyObject() runtime.Object {
	out := &BackupCheck{}
	in.DeepCopyInto(out)
	return out
}

func (in *BackupCheckList) DeepCopyObject() runtime.Object {
	out := &BackupCheckList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]BackupCheck, len(in.Items))
	for i := range in.Items {
		in.Items[i].DeepCopyInto(&out.Items[i])
	}
	return out
}

// ---- the converged reconcile ----------------------------------------------------------------------

// canonical: sorted keys, no HTML escaping (what fleetcheck's canonicalJSON gives for the same value).
func canonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func specHash(spec *BackupCheckSpec) (string, error) {
	generic := map[string]any{"timeout": spec.Timeout}
	backup := map[string]any{"name": spec.Backup.Name}
	if spec.Backup.Source != "" {
		backup["source"] = spec.Backup.Source
	}
	if spec.Backup.Checksum != "" {
		backup["checksum"] = spec.Backup.Checksum
	}
	generic["backup"] = backup
	var template any
	if err := json.Unmarshal(spec.JobTemplate, &template); err != nil {
		return "", err
	}
	generic["jobTemplate"] = template
	if len(spec.Validation) > 0 {
		var validation any
		if err := json.Unmarshal(spec.Validation, &validation); err != nil {
			return "", err
		}
		generic["validation"] = validation
	}
	text, err := canonical(generic)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:])[:16], nil
}

func jobPhase(job *batchv1.Job) string {
	has := func(t batchv1.JobConditionType) bool {
		for _, c := range job.Status.Conditions {
			if c.Type == t && c.Status == "True" {
				return true
			}
		}
		return false
	}
	switch {
	case has(batchv1.JobComplete) || has(batchv1.JobSuccessCriteriaMet):
		return "Succeeded"
	case has(batchv1.JobFailed) || has(batchv1.JobFailureTarget):
		return "Failed"
	}
	return "Active"
}

func isRecorded(last *Run, job *batchv1.Job) bool {
	if last == nil {
		return false
	}
	if job.Labels[labelRun] == last.RunID {
		return last.Result != "Running"
	}
	started, err := time.Parse(time.RFC3339, last.StartTime)
	return err == nil && !job.CreationTimestamp.Time.After(started)
}

type reconciler struct {
	client     client.Client
	hashOnce   bool
	deepEqual  bool
	hashes     sync.Map // "uid/resourceVersion" → spec hash, with -hash-once
	reconciled atomic.Int64
	writes     atomic.Int64
	undecided  atomic.Int64
	errors     atomic.Int64
	done       chan struct{}
	target     atomic.Int64
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	defer func() {
		if r.reconciled.Add(1) == r.target.Load() {
			r.done <- struct{}{}
		}
	}()
	var check BackupCheck
	if err := r.client.Get(ctx, req.NamespacedName, &check); err != nil {
		r.errors.Add(1)
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !check.DeletionTimestamp.IsZero() || !containsString(check.Finalizers, finalizerName) {
		r.undecided.Add(1)
		return reconcile.Result{}, nil
	}
	var hash string
	if cached, ok := r.hashes.Load(string(check.UID) + "/" + check.ResourceVersion); r.hashOnce && ok {
		hash = cached.(string)
	} else {
		h, err := specHash(&check.Spec)
		if err != nil {
			r.errors.Add(1)
			return reconcile.Result{}, err
		}
		hash = h
		if r.hashOnce {
			r.hashes.Store(string(check.UID)+"/"+check.ResourceVersion, hash)
		}
	}
	var jobs batchv1.JobList
	if err := r.client.List(ctx, &jobs, client.InNamespace(req.Namespace), client.MatchingFields{ownerUIDIndex: string(check.UID)}); err != nil {
		r.errors.Add(1)
		return reconcile.Result{}, err
	}
	last := check.Status.LastRun
	// Runs newer than lastRun, and the Jobs still active: either means work, not the converged path.
	active := 0
	for i := range jobs.Items {
		job := &jobs.Items[i]
		if job.Labels[labelPhase] == "validation" {
			continue
		}
		if jobPhase(job) == "Active" && job.DeletionTimestamp.IsZero() {
			active++
		}
		if run := job.Labels[labelRun]; run != "" && (last == nil || run != last.RunID) && !isRecorded(last, job) {
			r.undecided.Add(1)
			return reconcile.Result{}, nil
		}
	}
	generationRun := fmt.Sprintf("g%d", check.Generation)
	if check.Spec.Schedule != "" || check.Spec.Suspend || last == nil || last.Result == "Running" || active > 0 || last.RunID != generationRun {
		r.undecided.Add(1)
		return reconcile.Result{}, nil
	}
	// History to prune: finished restore Jobs beyond the limits, newest first, lastRun's own first.
	keep := map[string]int32{"Succeeded": 3, "Failed": 1}
	if check.Spec.SuccessfulRunsHistoryLimit != nil {
		keep["Succeeded"] = *check.Spec.SuccessfulRunsHistoryLimit
	}
	if check.Spec.FailedRunsHistoryLimit != nil {
		keep["Failed"] = *check.Spec.FailedRunsHistoryLimit
	}
	finished := make([]*batchv1.Job, 0, len(jobs.Items))
	for i := range jobs.Items {
		if jobs.Items[i].Labels[labelPhase] != "validation" {
			finished = append(finished, &jobs.Items[i])
		}
	}
	sort.SliceStable(finished, func(a, b int) bool {
		ca, cb := finished[a].Labels[labelRun] == last.RunID, finished[b].Labels[labelRun] == last.RunID
		if ca != cb {
			return ca
		}
		return finished[a].CreationTimestamp.After(finished[b].CreationTimestamp.Time)
	})
	seen := map[string]int32{}
	for _, job := range finished {
		phase := jobPhase(job)
		if phase == "Active" || !job.DeletionTimestamp.IsZero() || !isRecorded(last, job) {
			continue
		}
		seen[phase]++
		if seen[phase] > keep[phase] {
			r.undecided.Add(1) // pruning is not the converged path
			return reconcile.Result{}, nil
		}
	}
	// The status as it should be: Verified from lastRun when lastRun verified this spec. As operators
	// are usually written: the object the cache handed out (already a copy) is changed in place, with a
	// copy kept for the merge patch, and written when a setter reports a change. -deep-equal instead
	// builds the desired status on a copy and compares it whole with equality.Semantic.DeepEqual (the
	// first version of this reference; reflection over every field and every byte of the raw JSON
	// fields made that comparison 40% of its CPU).
	if r.deepEqual {
		desired := *check.Status.DeepCopyStatus()
		desired.ObservedGeneration = check.Generation
		if _, ok := setVerified(&check, hash, &desired.Conditions); !ok {
			r.undecided.Add(1)
			return reconcile.Result{}, nil
		}
		if equality.Semantic.DeepEqual(desired, check.Status) {
			return reconcile.Result{}, nil
		}
		patch := client.MergeFrom(check.DeepCopy())
		check.Status = desired
		if err := r.client.Status().Patch(ctx, &check, patch); err != nil {
			r.errors.Add(1)
			return reconcile.Result{}, err
		}
		r.writes.Add(1)
		return reconcile.Result{}, nil
	}
	before := check.DeepCopy()
	setChanged, ok := setVerified(before, hash, &check.Status.Conditions)
	if !ok {
		r.undecided.Add(1)
		return reconcile.Result{}, nil
	}
	changed := setChanged || check.Status.ObservedGeneration != check.Generation
	check.Status.ObservedGeneration = check.Generation
	if !changed {
		return reconcile.Result{}, nil
	}
	if err := r.client.Status().Patch(ctx, &check, client.MergeFrom(before)); err != nil {
		r.errors.Add(1)
		return reconcile.Result{}, err
	}
	r.writes.Add(1)
	return reconcile.Result{}, nil
}

// setVerified carries Verified over to this generation when lastRun verified this spec; ok is false
// when there is no Verified to carry (not the converged path).
func setVerified(check *BackupCheck, hash string, conditions *[]metav1.Condition) (changed, ok bool) {
	last := check.Status.LastRun
	if last.SpecHash != hash && (last.SpecHash != "" || check.Status.ObservedGeneration != check.Generation) {
		return false, true
	}
	verified := meta.FindStatusCondition(check.Status.Conditions, "Verified")
	if verified == nil {
		return false, false
	}
	return meta.SetStatusCondition(conditions, metav1.Condition{
		Type:               "Verified",
		Status:             verified.Status,
		Reason:             verified.Reason,
		Message:            verified.Message,
		ObservedGeneration: check.Generation,
	}), true
}

func (in *BackupCheck) DeepCopy() *BackupCheck {
	out := &BackupCheck{}
	in.DeepCopyInto(out)
	return out
}

func (s *BackupCheckStatus) DeepCopyStatus() *BackupCheckStatus {
	c := BackupCheck{Status: *s}
	return &c.DeepCopy().Status
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func main() {
	namespace := flag.String("namespace", "bench", "namespace of the checks")
	rounds := flag.Int("rounds", 20, "times every check is enqueued")
	workers := flag.Int("workers", 1, "MaxConcurrentReconciles")
	hashOnce := flag.Bool("hash-once", false, "keep each object's spec hash by uid and resourceVersion")
	deepEqual := flag.Bool("deep-equal", false, "compare the whole desired status with equality.Semantic.DeepEqual")
	cpuProfile := flag.String("cpuprofile", "", "write a pprof CPU profile of the rounds to this file")
	flag.Parse()
	ctrl.SetLogger(logrDiscard())

	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	scheme.AddKnownTypes(groupVersion, &BackupCheck{}, &BackupCheckList{})
	metav1.AddToGroupVersion(scheme, groupVersion)

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = 1000, 2000
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: server.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
	})
	must(err)
	must(mgr.GetFieldIndexer().IndexField(context.Background(), &batchv1.Job{}, ownerUIDIndex, func(o client.Object) []string {
		if owner := metav1.GetControllerOf(o); owner != nil && owner.Kind == "BackupCheck" {
			return []string{string(owner.UID)}
		}
		return nil
	}))
	r := &reconciler{client: mgr.GetClient(), hashOnce: *hashOnce, deepEqual: *deepEqual, done: make(chan struct{}, 1)}
	events := make(chan event.TypedGenericEvent[*BackupCheck], 4096)
	must(ctrl.NewControllerManagedBy(mgr).
		Named("backupcheck").
		WatchesRawSource(source.Channel(events, &handler.TypedEnqueueRequestForObject[*BackupCheck]{})).
		Watches(&batchv1.Job{}, handler.EnqueueRequestForOwner(scheme, mgr.GetRESTMapper(), &BackupCheck{}, handler.OnlyControllerOwner())).
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers, SkipNameValidation: ptr(true)}).
		Complete(r))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { must(mgr.Start(ctx)) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		panic("caches did not sync")
	}
	// The cache also starts the check informer (Get uses it); wait for it by listing through it.
	var list BackupCheckList
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(*namespace)); err == nil && len(list.Items) > 0 {
			break
		}
		if time.Now().After(deadline) {
			panic("no BackupChecks in the cache")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // initial events (none enqueue: only the channel and Job events do)
	// The heap with every check and Job cached, after a collection (compared across check counts: the
	// difference per check is what a cached check costs).
	heapBytes := heapAfterGC()
	r.reconciled.Store(0)
	r.target.Store(int64(len(list.Items)))

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		must(err)
		must(pprof.StartCPUProfile(f))
	}
	began, cpu0 := time.Now(), cpuSeconds()
	for round := 1; round <= *rounds; round++ {
		r.target.Store(int64(round * len(list.Items)))
		for i := range list.Items {
			events <- event.TypedGenericEvent[*BackupCheck]{Object: &list.Items[i]}
		}
		<-r.done
	}
	cpu, wall := cpuSeconds()-cpu0, time.Since(began).Seconds()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	out, _ := json.Marshal(map[string]any{
		"checks": len(list.Items), "reconciles": r.reconciled.Load(), "wallSeconds": wall, "cpuSeconds": cpu,
		"writes": r.writes.Load(), "undecided": r.undecided.Load(), "errors": r.errors.Load(),
		"gomaxprocs": runtimeGOMAXPROCS(), "heapBytes": heapBytes, "workers": *workers, "hashOnce": *hashOnce, "deepEqual": *deepEqual,
	})
	fmt.Println(string(out))
	cancel()
	os.Exit(0)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func ptr[T any](v T) *T { return &v }
