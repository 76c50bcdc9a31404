package main

// The -selftest mode: the counter checker (counter.go) against porcupine
// on random small counter histories, which porcupine decides in
// milliseconds. Every verdict must agree, and every linearization the
// counter checker finds must replay (verifyCounterOrder).
//
// A history comes from a simulated run: a few clients, each one operation
// at a time, every operation taking effect at a random point of its
// interval (so the run is linearizable), on a small integer clock so that
// calls and returns often coincide. Some incrs get an unknown outcome; of
// those, some took effect at some later point and some never did. The
// amounts mix 1, a few small repeated ones and distinct ones, some large.
// 60% of the histories are then perturbed (an answer, an interval, an
// amount, a lost or later unknown incr), which makes many of them
// non-linearizable; the report counts each verdict, each kind of
// violation the counter checker found, and each perturbation.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// runSelftest compares the checkers on n random histories; it returns the
// exit status (0 when they agree on all).
func runSelftest(n int, seed int64, timeout time.Duration) int {
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	fmt.Printf("selftest: %d random counter histories, seed %d (-seed)\n", n, seed)
	rng := rand.New(rand.NewSource(seed))
	verdicts := map[porcupine.CheckResult]int{}
	kinds := map[string]int{}
	perturbed := map[string]int{}
	var checked, withGaps, withUnknowns, ops, mismatches int
	var porcupineTime, counterTime time.Duration
	for i := 0; i < n && mismatches < 3; i++ {
		checked++
		h, how := genCounterHistory(rng)
		doc, err := json.Marshal(h)
		if err != nil {
			panic(err)
		}
		byKey, _, err := load(bytes.NewReader(doc))
		if err != nil {
			fmt.Printf("history %d: %v\n%s\n", i, err, doc)
			return 1
		}
		key := byKey["c"]
		ops += len(key)
		for _, o := range key {
			if o.Output.(output).unknown {
				withUnknowns++
				break
			}
		}
		if !counterApplies(key) {
			fmt.Printf("history %d: the counter checker does not apply\n%s\n", i, doc)
			return 1
		}
		start := time.Now()
		want := porcupine.CheckOperationsTimeout(model, key, timeout)
		porcupineTime += time.Since(start)
		start = time.Now()
		got := checkCounter(key, time.Now().Add(timeout))
		counterTime += time.Since(start)
		if got.gaps > 0 {
			withGaps++
		}
		var bad string
		switch {
		case want == porcupine.Unknown:
			bad = "porcupine undecided"
		case got.result != want:
			bad = fmt.Sprintf("porcupine says %s, the counter checker %s", verdictName(want), verdictName(got.result))
		case got.result == porcupine.Ok:
			if err := verifyCounterOrder(key, got.order); err != nil {
				bad = "the counter checker's linearization does not hold: " + err.Error()
			}
		}
		if bad != "" {
			mismatches++
			fmt.Printf("history %d (%s): %s\n", i, how, bad)
			if got.why != nil {
				fmt.Print(explainCounter("c", key, got.why, nil))
			}
			fmt.Printf("%s\n", doc)
			continue
		}
		verdicts[want]++
		perturbed[how]++
		if got.why != nil {
			kinds[got.why.kind]++
		}
	}
	fmt.Printf("selftest: %d histories (%d operations; %d with unknown incrs, %d with gaps only unknown incrs can fill): "+
		"%d linearizable, %d not linearizable, %d disagreements\n",
		checked, ops, withUnknowns, withGaps, verdicts[porcupine.Ok], verdicts[porcupine.Illegal], mismatches)
	fmt.Printf("selftest: violations by kind: %s\n", countsString(kinds))
	fmt.Printf("selftest: histories by perturbation: %s\n", countsString(perturbed))
	fmt.Printf("selftest: time in porcupine %v, in the counter checker %v\n",
		porcupineTime.Round(time.Millisecond), counterTime.Round(time.Millisecond))
	if mismatches > 0 {
		if checked < n {
			fmt.Printf("(stopped at the third disagreement, after %d histories)\n", checked)
		}
		fmt.Println("SELFTEST FAILED")
		return 1
	}
	fmt.Println("SELFTEST PASSED")
	return 0
}

func verdictName(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "not linearizable"
	}
	return "undecided"
}

func countsString(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// genCounterHistory simulates a small run on counter key "c" and perhaps
// perturbs it; it says how ("none" when not).
func genCounterHistory(rng *rand.Rand) (history, string) {
	type simOp struct {
		op
		point  float64 // when it took effect
		effect bool    // it took effect (always, for definite ones)
	}
	slots := 2 + rng.Intn(4)
	clock := make([]int64, slots)
	proc := make([]int, slots)
	for s := range proc {
		clock[s] = int64(rng.Intn(4))
		proc[s] = s
	}
	nextProc := slots
	amount := func() int64 {
		switch x := rng.Intn(10); {
		case x < 4:
			return 1
		case x < 7:
			return 2 + int64(rng.Intn(2))
		case x < 9:
			return 2 + int64(rng.Intn(10))
		default:
			return 60 + int64(rng.Intn(100)) // sums past a word of the reach table
		}
	}
	var sim []*simOp
	for n := 3 + rng.Intn(22); n > 0; n-- {
		s := rng.Intn(slots)
		call := clock[s] + int64(rng.Intn(3))
		ret := call + int64(rng.Intn(8))
		o := &simOp{op: op{Process: proc[s], Key: "c", F: "read", Call: call}, effect: true}
		o.point = float64(call) + rng.Float64()*float64(ret-call)
		if rng.Intn(100) < 55 {
			o.F, o.N = "incr", amount()
			if rng.Intn(100) < 25 {
				// Unknown outcome: maybe it took effect, at any time
				// after its call; its client moves on as a new process.
				o.effect = rng.Intn(100) < 60
				o.point = float64(call) + rng.Float64()*float64(rng.Intn(15))
				proc[s] = nextProc
				nextProc++
				clock[s] = call + int64(rng.Intn(5))
				sim = append(sim, o)
				continue
			}
		}
		r := ret
		o.Ret = &r
		clock[s] = ret + int64(rng.Intn(3))
		sim = append(sim, o)
	}
	// The answers, in the order the operations took effect.
	byPoint := append([]*simOp(nil), sim...)
	sort.SliceStable(byPoint, func(a, b int) bool { return byPoint[a].point < byPoint[b].point })
	var count int64
	for _, o := range byPoint {
		if !o.effect {
			continue
		}
		if o.F == "incr" {
			count += o.N
		}
		if o.Ret == nil {
			continue
		}
		if o.F == "read" && count == 0 && rng.Intn(2) == 0 {
			continue // nil
		}
		v := strconv.FormatInt(count, 10)
		o.Value = &v
	}

	how := "none"
	var definite, unknown, effective []*simOp
	for _, o := range sim {
		switch {
		case o.Ret != nil:
			definite = append(definite, o)
		case o.effect:
			effective = append(effective, o)
			unknown = append(unknown, o)
		default:
			unknown = append(unknown, o)
		}
	}
	pick := func(os []*simOp) *simOp { return os[rng.Intn(len(os))] }
	if rng.Intn(100) < 60 && len(definite) > 0 {
		switch rng.Intn(8) {
		case 0, 1:
			how = "answer±1"
			o := pick(definite)
			v := answerOfSim(o.Value) + int64(1-2*rng.Intn(2))
			s := strconv.FormatInt(v, 10)
			o.Value = &s
		case 2:
			how = "answer+amount"
			o := pick(definite)
			v := answerOfSim(o.Value) + amount()
			s := strconv.FormatInt(v, 10)
			o.Value = &s
		case 3:
			how = "shift"
			o := pick(definite)
			d := int64(1 + rng.Intn(6))
			if rng.Intn(2) == 0 {
				d = -min(d, o.Call)
			}
			o.Call += d
			r := *o.Ret + d
			o.Ret = &r
		case 4:
			how = "instant"
			o := pick(definite)
			if rng.Intn(2) == 0 {
				r := o.Call
				o.Ret = &r
			} else {
				o.Call = *o.Ret
			}
		case 5:
			how = "lost-unknown"
			if len(effective) > 0 {
				o := pick(effective)
				o.Key = "" // dropped below
			}
		case 6:
			how = "late-unknown"
			if len(unknown) > 0 {
				o := pick(unknown)
				o.Call += int64(1 + rng.Intn(8))
			}
		case 7:
			how = "amount"
			o := pick(definite)
			if o.F == "incr" {
				o.N = amount()
			} else {
				o.Value = nil
			}
		}
	}
	h := history{Models: map[string]string{"c": "counter"}}
	for _, o := range sim {
		if o.Key != "" {
			h.Ops = append(h.Ops, o.op)
		}
	}
	return h, how
}

func answerOfSim(v *string) int64 {
	if v == nil {
		return 0
	}
	n, _ := strconv.ParseInt(*v, 10, 64)
	return n
}
