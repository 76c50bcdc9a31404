// Command lin-checker checks a history recorded by Elsa's linearizability
// test (tests/linearizability.rs), key by key.
//
// It owns the sequential models (a register and a counter), how an
// operation whose outcome is unknown is modelled, and the verdict. Register
// keys (and a counter key with an increment by n <= 0) are searched by
// porcupine; counter keys by an exact search of their own that exploits
// the counter's monotonicity (counter.go: porcupine's search is
// exponential in the pending increments of unknown outcome). The history
// format is documented on [history].
//
// Usage:
//
//	lin-checker [-timeout 60s] [-html out.html] history.json   (or - for stdin)
//	lin-checker -selftest N [-seed S] [-timeout 60s]
//
// With -html, porcupine's visualization of the keys that are not
// linearizable goes to that file (with the faults as annotations); on a
// counter key its search may not finish within the timeout, and then the
// picture shows how far it got (said on stderr).
//
// -selftest N compares the counter search with porcupine on N random
// small counter histories (selftest.go) and exits 0 when every verdict
// agrees, 1 otherwise.
//
// Exit status: 0 linearizable, 1 not linearizable (each bad key and a short
// description on stdout), 2 bad usage or input, 3 undecided within the
// timeout (no verdict: neither a pass nor a violation).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// history is the JSON document the Rust recorder writes.
type history struct {
	// Models maps every key to "register" or "counter"; a key follows one
	// model only.
	Models map[string]string `json:"models"`
	Ops    []op              `json:"ops"`
	// Annotations (the run's faults) only decorate the report and the
	// visualization.
	Annotations []annotation `json:"annotations"`
}

// op is one client operation. Times are nanoseconds on one monotonic clock.
type op struct {
	// Process is the client process; a process whose operation got no
	// definite answer never issues another one (Jepsen's convention), so
	// every process is sequential.
	Process int    `json:"process"`
	Node    int    `json:"node"`
	Key     string `json:"key"`
	// F is "write" or "read" on a register, "incr" or "read" on a counter.
	F string `json:"f"`
	// Value is what a write wrote, what a read answered (null: the key was
	// absent), or the integer an incr answered (null when unknown).
	Value *string `json:"value"`
	// N is how much an incr adds.
	N    int64 `json:"n"`
	Call int64 `json:"call"`
	// Ret is null when the outcome is unknown (an error or no reply): the
	// operation may take effect at any time after Call, or never.
	Ret *int64 `json:"ret"`
}

type annotation struct {
	Tag         string `json:"tag"`
	Start       int64  `json:"start"`
	End         int64  `json:"end"`
	Description string `json:"description"`
}

// input is what a client asked for.
type input struct {
	counter bool // the key's model: counter (true) or register
	f       string
	value   string // write: the value written
	n       int64  // incr: the amount
}

// output is what it got back.
type output struct {
	unknown bool   // no definite answer: any outcome is possible
	absent  bool   // a read of a missing key
	value   string // a read's answer, or an incr's new value
}

// state is a register's value or a counter's count (a missing counter
// counts 0, as INCR treats it). Comparable, so porcupine can use ==.
type state struct {
	set   bool
	value string
	count int64
}

func step(st interface{}, in interface{}, out interface{}) (bool, interface{}) {
	s, i, o := st.(state), in.(input), out.(output)
	switch i.f {
	case "write":
		return true, state{set: true, value: i.value}
	case "incr":
		next := state{set: true, count: s.count + i.n}
		if o.unknown {
			return true, next
		}
		got, err := strconv.ParseInt(o.value, 10, 64)
		return err == nil && got == next.count, next
	case "read":
		if i.counter {
			var got int64
			if !o.absent {
				n, err := strconv.ParseInt(o.value, 10, 64)
				if err != nil {
					return false, s
				}
				got = n
			}
			return got == s.count, s
		}
		if o.absent {
			return !s.set, s
		}
		return s.set && s.value == o.value, s
	}
	return false, s
}

func describeOp(in interface{}, out interface{}) string {
	i, o := in.(input), out.(output)
	answer := o.value
	switch {
	case o.unknown:
		answer = "?"
	case o.absent:
		answer = "nil"
	}
	switch i.f {
	case "write":
		if o.unknown {
			return fmt.Sprintf("write(%s) → ?", i.value)
		}
		return fmt.Sprintf("write(%s)", i.value)
	case "incr":
		return fmt.Sprintf("incr(%d) → %s", i.n, answer)
	}
	return fmt.Sprintf("read() → %s", answer)
}

func describeState(st interface{}) string {
	s := st.(state)
	switch {
	case !s.set:
		return "nil"
	case s.value != "":
		return s.value
	}
	return strconv.FormatInt(s.count, 10)
}

var model = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range ops {
			k := o.Metadata.(meta).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		sort.Strings(keys)
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return state{} },
	Step: step,
	Hash: func(st interface{}) uint64 {
		s := st.(state)
		h := fnv.New64a()
		h.Write([]byte(s.value))
		return h.Sum64() ^ uint64(s.count)*0x9e3779b97f4a7c15
	},
	DescribeOperation:         describeOp,
	DescribeState:             describeState,
	DescribeOperationMetadata: func(m interface{}) string { return m.(meta).String() },
}

// meta travels with each operation for descriptions and the visualization.
type meta struct {
	key     string
	node    int
	process int
}

func (m meta) String() string {
	return fmt.Sprintf("%s via node %d, process %d", m.key, m.node, m.process)
}

// load parses and validates a history and turns it into porcupine
// operations, grouped by key.
func load(r io.Reader) (map[string][]porcupine.Operation, []porcupine.Annotation, error) {
	var h history
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, nil, fmt.Errorf("parse history: %w", err)
	}
	// An operation with an unknown outcome is pending until after every
	// other operation: porcupine's way of saying it may take effect at any
	// point after its call, or never.
	var end int64
	for _, o := range h.Ops {
		if o.Call > end {
			end = o.Call
		}
		if o.Ret != nil && *o.Ret > end {
			end = *o.Ret
		}
	}
	end++

	// Values some read returned: a write of any other value with an unknown
	// outcome can be dropped (see below).
	read := map[string]map[string]bool{}
	for _, o := range h.Ops {
		if o.F == "read" && o.Ret != nil && o.Value != nil {
			if read[o.Key] == nil {
				read[o.Key] = map[string]bool{}
			}
			read[o.Key][*o.Value] = true
		}
	}

	byKey := map[string][]porcupine.Operation{}
	for n, o := range h.Ops {
		kind, ok := h.Models[o.Key]
		if !ok {
			return nil, nil, fmt.Errorf("op %d: key %q has no model", n, o.Key)
		}
		if o.Ret != nil && *o.Ret < o.Call {
			return nil, nil, fmt.Errorf("op %d: returns (%d) before its call (%d)", n, *o.Ret, o.Call)
		}
		in := input{counter: kind == "counter", f: o.F, n: o.N}
		out := output{unknown: o.Ret == nil}
		switch {
		case kind == "register" && o.F == "write":
			if o.Value == nil {
				return nil, nil, fmt.Errorf("op %d: a write without a value", n)
			}
			in.value = *o.Value
			// A write whose outcome is unknown and whose value nobody read
			// changes nothing a check can see: if the history is
			// linearizable without it, it is with it placed last; if with
			// it, no read can sit between it and the next write, so also
			// without it. Dropping it is exact, and keeps porcupine from
			// trying it at every later point.
			if out.unknown && !read[o.Key][*o.Value] {
				continue
			}
		case kind == "counter" && o.F == "incr":
			if !out.unknown {
				if o.Value == nil {
					return nil, nil, fmt.Errorf("op %d: an incr that returned no value", n)
				}
				out.value = *o.Value
			}
		case o.F == "read" && (kind == "register" || kind == "counter"):
			// A read that failed says nothing.
			if out.unknown {
				continue
			}
			out.absent = o.Value == nil
			if o.Value != nil {
				out.value = *o.Value
			}
		default:
			return nil, nil, fmt.Errorf("op %d: %q is not an operation of a %s key", n, o.F, kind)
		}
		ret := end
		if o.Ret != nil {
			ret = *o.Ret
		}
		byKey[o.Key] = append(byKey[o.Key], porcupine.Operation{
			ClientId: o.Process,
			Input:    in,
			Call:     o.Call,
			Output:   out,
			Return:   ret,
			Metadata: meta{key: o.Key, node: o.Node, process: o.Process},
		})
	}
	var notes []porcupine.Annotation
	for _, a := range h.Annotations {
		notes = append(notes, porcupine.Annotation{
			Tag:         a.Tag,
			Start:       a.Start,
			End:         a.End,
			Description: a.Description,
		})
	}
	return byKey, notes, nil
}

// explain says why a key's history is not linearizable: the longest prefix
// porcupine could linearize, the state it leaves, and the operations with
// a definite answer that must come next, none of which fits. (Operations
// of unknown outcome always fit; porcupine tried them too.)
func explain(key string, ops []porcupine.Operation, notes []porcupine.Annotation, timeout time.Duration) string {
	_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	// One partition (one key); ids index ops.
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	var st interface{} = state{}
	done := make([]bool, len(ops))
	var definite []int
	for _, id := range longest {
		_, st = step(st, ops[id].Input, ops[id].Output)
		done[id] = true
		if !ops[id].Output.(output).unknown {
			definite = append(definite, id)
		}
	}
	var rest []porcupine.Operation
	pending := 0
	for id, o := range ops {
		switch {
		case done[id]:
		case o.Output.(output).unknown:
			pending++
		default:
			rest = append(rest, o)
		}
	}
	// What must come next: the definite operations called before the
	// earliest return among them.
	sort.Slice(rest, func(a, b int) bool { return rest[a].Return < rest[b].Return })
	var next []porcupine.Operation
	for _, o := range rest {
		if o.Call <= rest[0].Return {
			next = append(next, o)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "key %s: not linearizable; porcupine linearized at most %d of its %d operations "+
		"(%d of unknown outcome among them), reaching state %s\n",
		key, len(longest), len(ops), len(longest)-len(definite), describeState(st))
	if len(definite) > 3 {
		definite = definite[len(definite)-3:]
	}
	for _, id := range definite {
		fmt.Fprintf(&b, "  last answered ops linearized: %s\n", describeTimed(ops[id]))
	}
	fmt.Fprintf(&b, "  then none of these fits (ops of unknown outcome still pending: %d):\n", pending)
	for n, o := range next {
		if n == 8 {
			fmt.Fprintf(&b, "    … and %d more\n", len(next)-n)
			break
		}
		fmt.Fprintf(&b, "    %s\n", describeTimed(o))
	}
	// The annotations are the run's faults: name the last one that began
	// before the first operation that does not fit.
	if len(next) > 0 {
		if last := lastNote(notes, next[0].Call); last != nil {
			fmt.Fprintf(&b, "  last fault before it: %s [from %.3f s]\n", last.Description, float64(last.Start)/1e9)
		}
	}
	return b.String()
}

func describeTimed(o porcupine.Operation) string {
	ret := fmt.Sprintf("%.3f s", float64(o.Return)/1e9)
	if o.Output.(output).unknown {
		ret = "unknown"
	}
	return fmt.Sprintf("%-24s [%.3f s .. %s] %s", describeOp(o.Input, o.Output), float64(o.Call)/1e9, ret, o.Metadata.(meta))
}

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "give up (exit 3) if a key is not decided within this time")
	html := flag.String("html", "", "write porcupine's visualization of the keys that fail (if any) to this file")
	selftest := flag.Int("selftest", 0, "instead of checking a history, compare the counter checker with porcupine on this many random histories")
	seed := flag.Int64("seed", 0, "with -selftest: the random seed (0: pick one)")
	flag.Parse()
	if *selftest > 0 && flag.NArg() == 0 {
		os.Exit(runSelftest(*selftest, *seed, *timeout))
	}
	if flag.NArg() != 1 || *selftest > 0 {
		fmt.Fprintln(os.Stderr, "usage: lin-checker [-timeout 60s] [-html out.html] history.json|-")
		fmt.Fprintln(os.Stderr, "       lin-checker -selftest N [-seed S] [-timeout 60s]")
		os.Exit(2)
	}
	var r io.Reader = os.Stdin
	if path := flag.Arg(0); path != "-" {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer f.Close()
		r = f
	}
	byKey, notes, err := load(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	// Keys are independent: check them side by side.
	results := make([]keyResult, len(keys))
	var wg sync.WaitGroup
	for n, k := range keys {
		wg.Add(1)
		go func(n int, k string) {
			defer wg.Done()
			results[n] = checkKey(byKey[k], *timeout)
		}(n, k)
	}
	wg.Wait()

	var bad, undecided []string
	for n, k := range keys {
		switch results[n].result {
		case porcupine.Illegal:
			bad = append(bad, k)
		case porcupine.Unknown:
			undecided = append(undecided, k)
		}
	}
	for n, k := range keys {
		if results[n].result != porcupine.Illegal {
			continue
		}
		if why := results[n].counter; why != nil {
			fmt.Print(explainCounter(k, byKey[k], why, notes))
		} else {
			fmt.Print(explain(k, byKey[k], notes, *timeout))
		}
	}
	for _, k := range undecided {
		fmt.Printf("key %s: undecided within %v\n", k, *timeout)
	}
	if *html != "" && len(bad) > 0 {
		var ops []porcupine.Operation
		for _, k := range bad {
			ops = append(ops, byKey[k]...)
		}
		// Porcupine draws the picture, also for the counter keys it did
		// not decide: its search may not finish on them in time.
		res, info := porcupine.CheckOperationsVerbose(model, ops, *timeout)
		switch res {
		case porcupine.Unknown:
			fmt.Fprintf(os.Stderr, "visualization: porcupine did not finish within %v; %s shows its partial search\n", *timeout, *html)
		case porcupine.Ok:
			fmt.Fprintf(os.Stderr, "visualization: porcupine finds %s linearizable: the checkers disagree (a bug)\n", strings.Join(bad, ", "))
		}
		info.AddAnnotations(notes)
		if err := porcupine.VisualizePath(model, info, *html); err != nil {
			fmt.Fprintln(os.Stderr, "visualization:", err)
		}
	}
	total := 0
	for _, ops := range byKey {
		total += len(ops)
	}
	switch {
	case len(bad) > 0:
		fmt.Printf("NOT LINEARIZABLE: %d of %d keys (%s); %d operations checked\n", len(bad), len(keys), strings.Join(bad, ", "), total)
		os.Exit(1)
	case len(undecided) > 0:
		fmt.Printf("UNDECIDED: %d of %d keys within %v; %d operations checked\n", len(undecided), len(keys), *timeout, total)
		os.Exit(3)
	}
	fmt.Printf("LINEARIZABLE: %d keys, %d operations checked\n", len(keys), total)
}

// keyResult is the verdict on one key.
type keyResult struct {
	result porcupine.CheckResult
	// counter explains a violation the counter checker found (nil when
	// porcupine decided the key).
	counter *counterViolation
}

// checkKey checks one key's operations: a counter key with the counter
// checker (counter.go) when it applies, everything else with porcupine.
func checkKey(ops []porcupine.Operation, timeout time.Duration) keyResult {
	if len(ops) > 0 && ops[0].Input.(input).counter && counterApplies(ops) {
		v := checkCounter(ops, time.Now().Add(timeout))
		if v.result == porcupine.Ok {
			if err := verifyCounterOrder(ops, v.order); err != nil {
				// A bug in the counter checker: no verdict is better than
				// a wrong one.
				fmt.Fprintf(os.Stderr, "counter checker: its linearization of %s does not hold: %v\n",
					ops[0].Metadata.(meta).key, err)
				os.Exit(2)
			}
		}
		return keyResult{result: v.result, counter: v.why}
	}
	return keyResult{result: porcupine.CheckOperationsTimeout(model, ops, timeout)}
}
