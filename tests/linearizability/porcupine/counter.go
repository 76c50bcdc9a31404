package main

// An exact checker for counter keys, in place of porcupine's search.
//
// Why by hand: porcupine (Wing & Gong's search with Lowe's cache) memoizes
// (set of operations linearized, state). An incr of unknown outcome is
// pending until the end of the history (it may take effect at any time
// after its call, or never) and always steps, so at every later point of
// the history porcupine can linearize any subset of the k pending unknown
// incrs of a key: up to 2^k cache entries per point, each with a bitset
// of all the key's operations. On a recorded history of 48k operations
// (some 6000 per counter key), 12 unknown incrs added to one counter key
// took porcupine 4 to 23 s and up to 5 GB, 14 took 100 s and 10 GB, 16
// were undecided after 2 minutes and 12 to 15 GB. (Unknown register
// writes do not suffer: load drops the ones nobody read, exactly.)
//
// The counter model has structure porcupine cannot use: the count starts
// at 0 and every incr adds n > 0, so along any linearization the count
// strictly increases with each incr and never decreases.
//
// # Levels
//
// Every operation with a definite answer names a count v: a read answers
// the count (nil is 0), an incr answers the count it produced. Group the
// definite operations by v into levels, in increasing order of v. In a
// linearization the count holds each value during one contiguous stretch,
// so the definite operations appear level by level; a level's definite
// incr (the one that produced v) is what enters v, so it comes first in
// its level and then its reads, which commute; two definite incrs that
// both answered v cannot both enter it. Between level u and the next
// level v only incrs of unknown outcome can sit, and they must add exactly
//
//	gap(v) = v − u − (the amount of v's incr, or 0 when v has only reads)
//
// (with u = 0 before the first level): a negative gap is a violation, a
// zero gap needs nothing, a positive gap needs a set of distinct unknown
// incrs that sums to it. Unknown incrs no gap uses go after everything
// (their return is after the end of the history), which is always allowed:
// they never took effect, or took effect after the last answer.
//
// # Real time
//
// A sequence of operations respects real time iff no operation in it
// follows one that was called after it returned, that is iff c_a ≤ r_b for
// every a before b (intervals are closed, as in porcupine: a call and a
// return at the same instant are concurrent; porcupine sorts the call
// first). Equivalently the greedy earliest linearization points, p = the
// running maximum of the calls, stay within every return. With the levels
// fixed, that condition splits into pieces that do not depend on each
// other:
//
//   - every definite op of a lower level is called no later than every
//     definite op of a higher level returns, and a level's incr is called
//     no later than each of its reads returns (its reads in call order
//     need nothing more: c_a ≤ c_b ≤ r_b);
//   - an unknown incr used in the gap before level j is called no later
//     than every definite op of level j or above returns: call ≤ the
//     level's deadline d_j (the earliest such return). Its own return is
//     the end of the history, after every call, so nothing constrains the
//     ops placed before it.
//
// The deadlines do not decrease with j.
//
// # Covering the gaps
//
// What is left is: give each positive gap, in order, a set of still unused
// unknown incrs, each called by the gap's deadline, that sums to the gap.
// A depth-first search over the gaps does it, with two exact reductions:
//
//   - Symmetry: group the unknown incrs by amount and sort each group by
//     call. If a solution uses a later-called incr of some amount in gap j
//     while an earlier-called one of the same amount is unused or used in
//     a later gap j', swapping them is still a solution: the sums do not
//     change, the earlier call is before d_j too, and the later one was
//     called by d_j ≤ d_j'. So it suffices to take from each group its
//     earliest-called unused incrs: the used ones of a group are always a
//     prefix, and the search state is one count per group.
//   - The rest of the search depends only on that state and the gap
//     index, so failed (gap, counts) pairs are remembered.
//
// It prunes when, for some later gap, the gaps up to it need more than
// the unused incrs called by its deadline can add, and within a gap it
// follows only choices that can still complete the gap's sum (a bounded
// subset-sum table per gap, see reachable). Subset sum is hard in
// general, so the search has a time budget (the -timeout): when it runs
// out the key is undecided, as with porcupine. Real histories have a
// handful of positive gaps and of unknown incrs per key: it takes
// microseconds.
//
// A found assignment is turned into a full linearization, which
// verifyCounterOrder replays against the model (the step function
// porcupine uses) and the operations' real times before a key is declared
// linearizable. The -selftest mode compares this checker's verdicts with
// porcupine's on random small histories.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// counterLimit bounds amounts and answers the counter checker takes on,
// so that its sums cannot overflow (porcupine's model wraps int64s).
const counterLimit = 1 << 40

// counterApplies says whether checkCounter can decide a counter key's
// operations: every incr adds a positive amount (a decrement would break
// the monotonicity it rests on) and every read has a definite answer
// (load drops the others). Otherwise porcupine checks the key.
func counterApplies(ops []porcupine.Operation) bool {
	for _, o := range ops {
		i, out := o.Input.(input), o.Output.(output)
		if !i.counter {
			return false
		}
		switch i.f {
		case "incr":
			if i.n <= 0 || i.n >= counterLimit {
				return false
			}
		case "read":
			if out.unknown {
				return false
			}
		default:
			return false
		}
		if !out.unknown && !out.absent {
			if v, err := strconv.ParseInt(out.value, 10, 64); err == nil && (v >= counterLimit || v <= -counterLimit) {
				return false
			}
		}
	}
	return true
}

// counterLevel is the definite operations of a key that answered one count.
type counterLevel struct {
	value int64
	incr  int   // the definite incr that produced value, or -1
	reads []int // in call order
	// gap is what unknown incrs must add between the previous level and
	// this one.
	gap int64
	// deadline is the earliest return at this level or above: an unknown
	// incr that fills this gap is called no later. deadlineOp returns then.
	deadline   int64
	deadlineOp int
}

// first is the level's first operation: its incr, else its first read.
func (l *counterLevel) first() int {
	if l.incr >= 0 {
		return l.incr
	}
	return l.reads[0]
}

// counterVerdict is checkCounter's answer.
type counterVerdict struct {
	result porcupine.CheckResult
	// order is a linearization (indices of ops) when result is Ok.
	order []int
	// why explains a violation (result Illegal).
	why *counterViolation
	// gaps counts the positive gaps: levels some unknown incr had to reach.
	gaps int
}

// counterViolation says which operation cannot be placed and why.
type counterViolation struct {
	// kind names the condition that fails: "answer", "duplicate",
	// "decrease", "real-time", "read-before-incr" or "gap".
	kind   string
	what   string // one line: why it cannot be placed
	state  int64  // the count before it (not for "answer", "duplicate")
	before []int  // the last operations that leave that count
	stuck  []int  // the operations that do not fit
	// gap: a gap that no set of unknown incrs fills; pending are the
	// unknown incrs called by its deadline.
	gap     bool
	pending []int
	at      int64 // when the trouble starts (for the fault annotation)
}

// checkCounter decides whether a counter key's operations (which
// counterApplies accepted) are linearizable, giving up at deadline.
func checkCounter(ops []porcupine.Operation, deadline time.Time) counterVerdict {
	illegal := func(v *counterViolation) counterVerdict {
		return counterVerdict{result: porcupine.Illegal, why: v}
	}
	// Levels of definite operations, and the unknown incrs.
	byValue := map[int64]*counterLevel{}
	var unknowns []int
	for id, o := range ops {
		i, out := o.Input.(input), o.Output.(output)
		if out.unknown {
			unknowns = append(unknowns, id)
			continue
		}
		var v int64
		if !out.absent {
			n, err := strconv.ParseInt(out.value, 10, 64)
			if err != nil {
				// The model's step rejects it whatever the count: no
				// linearization can hold it.
				return illegal(&counterViolation{
					kind:  "answer",
					what:  fmt.Sprintf("the answer %q is not a count", out.value),
					stuck: []int{id},
					at:    o.Call,
				})
			}
			v = n
		}
		l := byValue[v]
		if l == nil {
			l = &counterLevel{value: v, incr: -1}
			byValue[v] = l
		}
		if i.f == "read" {
			l.reads = append(l.reads, id)
			continue
		}
		if l.incr >= 0 {
			return illegal(&counterViolation{
				kind:  "duplicate",
				what:  fmt.Sprintf("two increments both answered %d: only one can take the count there", v),
				stuck: []int{l.incr, id},
				at:    max(ops[l.incr].Call, o.Call),
			})
		}
		l.incr = id
	}
	levels := make([]*counterLevel, 0, len(byValue))
	for _, l := range byValue {
		sort.Slice(l.reads, func(a, b int) bool { return ops[l.reads[a]].Call < ops[l.reads[b]].Call })
		levels = append(levels, l)
	}
	sort.Slice(levels, func(a, b int) bool { return levels[a].value < levels[b].value })

	// The conditions on definite operations alone, level by level.
	var prev int64 // the count before the level
	prevOps := func(j int) []int {
		if j == 0 {
			return nil
		}
		l := levels[j-1]
		out := append([]int(nil), l.reads...)
		if l.incr >= 0 {
			out = append([]int{l.incr}, out...)
		}
		return out
	}
	maxCall, maxCallOp := int64(0), -1 // over the lower levels
	for j, l := range levels {
		var n int64
		if l.incr >= 0 {
			n = ops[l.incr].Input.(input).n
		}
		l.gap = l.value - prev - n
		if l.gap < 0 {
			what := fmt.Sprintf("it answers %d, but counts start at 0 and never go down", l.value)
			if l.incr >= 0 {
				what = fmt.Sprintf("it needs the count at %d before it, but counts never go down and the count is already %d", l.value-n, prev)
			}
			return illegal(&counterViolation{
				kind: "decrease", what: what, state: prev, before: prevOps(j),
				stuck: []int{l.first()}, at: ops[l.first()].Call,
			})
		}
		members := l.reads
		if l.incr >= 0 {
			members = append([]int{l.incr}, l.reads...)
		}
		for _, b := range members {
			if maxCallOp >= 0 && maxCall > ops[b].Return {
				return illegal(&counterViolation{
					kind: "real-time",
					what: fmt.Sprintf("it answers %d, yet it returned before an operation answering %d (a lower count, so it goes first) was called",
						l.value, answerOf(ops[maxCallOp])),
					state: prev, before: prevOps(j),
					stuck: []int{b, maxCallOp}, at: ops[b].Call,
				})
			}
			if l.incr >= 0 && b != l.incr && ops[l.incr].Call > ops[b].Return {
				return illegal(&counterViolation{
					kind:  "read-before-incr",
					what:  fmt.Sprintf("it read %d before the increment that produced %d was called", l.value, l.value),
					state: prev, before: prevOps(j),
					stuck: []int{b, l.incr}, at: ops[b].Call,
				})
			}
		}
		for _, b := range members {
			if ops[b].Call > maxCall || maxCallOp < 0 {
				maxCall, maxCallOp = ops[b].Call, b
			}
		}
		prev = l.value
	}
	for j := len(levels) - 1; j >= 0; j-- {
		l := levels[j]
		l.deadline, l.deadlineOp = ops[l.first()].Return, l.first()
		for _, b := range l.reads {
			if ops[b].Return < l.deadline {
				l.deadline, l.deadlineOp = ops[b].Return, b
			}
		}
		if j+1 < len(levels) && levels[j+1].deadline < l.deadline {
			l.deadline, l.deadlineOp = levels[j+1].deadline, levels[j+1].deadlineOp
		}
	}

	// The unknown incrs, by amount (largest first), each group in call order.
	s := &gapSearch{deadline: deadline, failed: map[string]bool{}}
	group := map[int64]int{}
	sort.Slice(unknowns, func(a, b int) bool { return ops[unknowns[a]].Call < ops[unknowns[b]].Call })
	for _, id := range unknowns {
		n := ops[id].Input.(input).n
		if _, ok := group[n]; !ok {
			group[n] = len(s.amounts)
			s.amounts = append(s.amounts, n)
			s.members = append(s.members, nil)
		}
		g := group[n]
		s.members[g] = append(s.members[g], id)
	}
	sort.Sort(byAmount{s})
	// The positive gaps, and how many of each group are called by each
	// one's deadline.
	var gapLevel []int
	for j, l := range levels {
		if l.gap == 0 {
			continue
		}
		gapLevel = append(gapLevel, j)
		s.need = append(s.need, l.gap)
		called := make([]int, len(s.amounts))
		for g, m := range s.members {
			called[g] = sort.Search(len(m), func(x int) bool { return ops[m[x]].Call > l.deadline })
		}
		s.called = append(s.called, called)
	}
	s.used = make([]int, len(s.amounts))
	s.take = make([][]int, len(s.need))
	s.reach = make([][][]uint64, len(s.need))
	for k := range s.take {
		s.take[k] = make([]int, len(s.amounts))
	}
	if !s.cover(0) {
		if s.timedOut {
			return counterVerdict{result: porcupine.Unknown, gaps: len(s.need)}
		}
		// No assignment gets past gap s.deepest.
		j := gapLevel[s.deepest]
		l := levels[j]
		var pending []int
		for g, m := range s.members {
			pending = append(pending, m[:s.called[s.deepest][g]]...)
		}
		sort.Slice(pending, func(a, b int) bool { return ops[pending[a]].Call < ops[pending[b]].Call })
		earlier := ""
		if s.deepest > 0 {
			earlier = fmt.Sprintf(" (with the %d earlier gaps filled in every possible way)", s.deepest)
		}
		return counterVerdict{result: porcupine.Illegal, why: &counterViolation{
			kind: "gap",
			what: fmt.Sprintf("increments of unknown outcome must first add exactly %d to the count, all called by %.3f s "+
				"(when %s returned)%s, and no set of them does",
				l.gap, float64(l.deadline)/1e9, describeOp(ops[l.deadlineOp].Input, ops[l.deadlineOp].Output), earlier),
			state: l.value - l.gap - amountOf(ops, l.incr), before: prevOps(j),
			stuck: []int{l.first()}, gap: true, pending: pending, at: ops[l.first()].Call,
		}, gaps: len(s.need)}
	}

	// The linearization: level by level, the unknown incrs that fill its
	// gap, its incr, its reads; then the unused unknown incrs.
	order := make([]int, 0, len(ops))
	next := make([]int, len(s.amounts))
	k := 0
	for _, l := range levels {
		if l.gap > 0 {
			var fill []int
			for g, t := range s.take[k] {
				fill = append(fill, s.members[g][next[g]:next[g]+t]...)
				next[g] += t
			}
			sort.Slice(fill, func(a, b int) bool { return ops[fill[a]].Call < ops[fill[b]].Call })
			order = append(order, fill...)
			k++
		}
		if l.incr >= 0 {
			order = append(order, l.incr)
		}
		order = append(order, l.reads...)
	}
	for g, m := range s.members {
		order = append(order, m[next[g]:]...)
	}
	return counterVerdict{result: porcupine.Ok, order: order, gaps: len(s.need)}
}

func amountOf(ops []porcupine.Operation, id int) int64 {
	if id < 0 {
		return 0
	}
	return ops[id].Input.(input).n
}

// answerOf is the count a definite counter operation answered.
func answerOf(o porcupine.Operation) int64 {
	out := o.Output.(output)
	if out.absent {
		return 0
	}
	v, _ := strconv.ParseInt(out.value, 10, 64)
	return v
}

// gapSearch fills the positive gaps with unknown incrs (see the top of
// the file): depth first, gap by gap, taking from each amount group its
// earliest-called unused incrs.
type gapSearch struct {
	amounts []int64 // per group, largest first
	members [][]int // per group: its unknown incrs, in call order
	need    []int64 // per positive gap: what it needs
	called  [][]int // per gap, per group: how many are called by its deadline
	used    []int   // per group: how many the gaps so far took
	take    [][]int // per gap, per group: how many it took (the answer)
	// reach, per gap, per group g: bit x is set when the unused incrs of
	// groups g and on that are called by the gap's deadline can add
	// exactly x (x up to what the gap needs); nil when the gap is too
	// wide to tabulate. Set on entering the gap.
	reach [][][]uint64
	// failed remembers (gap, used) states from which no assignment works.
	failed   map[string]bool
	deepest  int // the furthest gap the search reached
	steps    int
	deadline time.Time
	timedOut bool
}

type byAmount struct{ s *gapSearch }

func (b byAmount) Len() int           { return len(b.s.amounts) }
func (b byAmount) Less(i, j int) bool { return b.s.amounts[i] > b.s.amounts[j] }
func (b byAmount) Swap(i, j int) {
	b.s.amounts[i], b.s.amounts[j] = b.s.amounts[j], b.s.amounts[i]
	b.s.members[i], b.s.members[j] = b.s.members[j], b.s.members[i]
}

// tick counts a step of the search and says whether the time is up.
func (s *gapSearch) tick() bool {
	s.steps++
	if s.steps%4096 == 0 && time.Now().After(s.deadline) {
		s.timedOut = true
	}
	return s.timedOut
}

func (s *gapSearch) state(k int) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(k))
	for _, u := range s.used {
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(u))
	}
	return b.String()
}

// cover fills gaps k and on; it reports whether it could (the choices are
// then in take).
func (s *gapSearch) cover(k int) bool {
	if k == len(s.need) {
		return true
	}
	if k > s.deepest {
		s.deepest = k
	}
	if s.tick() {
		return false
	}
	key := s.state(k)
	if s.failed[key] {
		return false
	}
	// Prune: the gaps k..k' need more than the unused incrs called by
	// gap k''s deadline can add.
	var needed int64
	for k2 := k; k2 < len(s.need); k2++ {
		needed += s.need[k2]
		var avail int64
		for g, a := range s.amounts {
			avail += a * int64(s.called[k2][g]-s.used[g])
		}
		if needed > avail {
			s.failed[key] = true
			return false
		}
	}
	s.reach[k] = s.reachable(k)
	if s.choose(k, 0, s.need[k]) {
		return true
	}
	if !s.timedOut {
		s.failed[key] = true
	}
	return false
}

// reachLimit bounds the gaps reachable tabulates (a bit per amount up to
// the gap, per group): real gaps are a few thousand.
const reachLimit = 1 << 18

// reachable tabulates, for gap k and the incrs still unused, which sums
// each suffix of the groups can make (a bounded subset-sum table), so
// that choose only follows choices that complete the gap: without it an
// impossible gap costs up to 2^(number of groups).
func (s *gapSearch) reachable(k int) [][]uint64 {
	need := s.need[k]
	if need > reachLimit {
		return nil
	}
	words := int(need/64 + 1)
	reach := make([][]uint64, len(s.amounts)+1)
	reach[len(s.amounts)] = make([]uint64, words)
	reach[len(s.amounts)][0] = 1 // the empty set adds 0
	for g := len(s.amounts) - 1; g >= 0; g-- {
		acc := append([]uint64(nil), reach[g+1]...)
		cur := reach[g+1]
		for t := 0; t < s.called[k][g]-s.used[g] && s.amounts[g] <= need; t++ {
			cur = shiftUp(cur, s.amounts[g])
			for w := range acc {
				acc[w] |= cur[w]
			}
		}
		reach[g] = acc
	}
	// Bits past need (in the last word) are never read.
	return reach
}

// shiftUp is bits moved up by d places (sums plus d), same length.
func shiftUp(bits []uint64, d int64) []uint64 {
	out := make([]uint64, len(bits))
	words, shift := int(d/64), uint(d%64)
	for w := len(bits) - 1; w >= words; w-- {
		out[w] = bits[w-words] << shift
		if shift > 0 && w-words-1 >= 0 {
			out[w] |= bits[w-words-1] >> (64 - shift)
		}
	}
	return out
}

// choose decides how many more incrs of groups g and on gap k takes, to
// add rest; then goes on to the next gap.
func (s *gapSearch) choose(k, g int, rest int64) bool {
	if rest == 0 {
		return s.cover(k + 1)
	}
	if g == len(s.amounts) || s.tick() {
		return false
	}
	if reach := s.reach[k]; reach != nil {
		if reach[g][rest/64]&(1<<uint(rest%64)) == 0 {
			return false
		}
	} else {
		var avail int64
		for g2 := g; g2 < len(s.amounts); g2++ {
			avail += s.amounts[g2] * int64(s.called[k][g2]-s.used[g2])
		}
		if avail < rest {
			return false
		}
	}
	a := s.amounts[g]
	most := min(int64(s.called[k][g]-s.used[g]), rest/a)
	for t := int(most); t >= 0; t-- {
		s.used[g] += t
		s.take[k][g] = t
		if s.choose(k, g+1, rest-int64(t)*a) {
			return true
		}
		s.used[g] -= t
		s.take[k][g] = 0
		if s.timedOut {
			return false
		}
	}
	return false
}

// verifyCounterOrder checks a linearization independently of how it was
// found: every operation exactly once, each step accepted by the model,
// and real time respected (no operation after one called after it
// returned; an unknown outcome's return is the end of the history).
func verifyCounterOrder(ops []porcupine.Operation, order []int) error {
	if len(order) != len(ops) {
		return fmt.Errorf("the linearization has %d operations, the key %d", len(order), len(ops))
	}
	seen := make([]bool, len(ops))
	var st interface{} = state{}
	var maxCall int64
	for pos, id := range order {
		if seen[id] {
			return fmt.Errorf("op %d twice in the linearization", id)
		}
		seen[id] = true
		ok, next := step(st, ops[id].Input, ops[id].Output)
		if !ok {
			return fmt.Errorf("position %d: %s does not follow state %s", pos, describeOp(ops[id].Input, ops[id].Output), describeState(st))
		}
		st = next
		if pos == 0 || ops[id].Call > maxCall {
			maxCall = ops[id].Call
		}
		if maxCall > ops[id].Return {
			return fmt.Errorf("position %d: %s returned at %d, before an earlier op was called at %d", pos, describeOp(ops[id].Input, ops[id].Output), ops[id].Return, maxCall)
		}
	}
	return nil
}

// explainCounter reports a counter key's violation like explain does.
func explainCounter(key string, ops []porcupine.Operation, v *counterViolation, notes []porcupine.Annotation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "key %s: not linearizable (counter check): %s cannot be placed: %s\n",
		key, describeOp(ops[v.stuck[0]].Input, ops[v.stuck[0]].Output), v.what)
	if v.kind != "answer" && v.kind != "duplicate" {
		fmt.Fprintf(&b, "  the count before it: %d\n", v.state)
	}
	before := v.before
	if len(before) > 3 {
		before = before[len(before)-3:]
	}
	for _, id := range before {
		fmt.Fprintf(&b, "  last answered ops at that count: %s\n", describeTimed(ops[id]))
	}
	fmt.Fprintf(&b, "  the op that cannot be placed: %s\n", describeTimed(ops[v.stuck[0]]))
	for _, id := range v.stuck[1:] {
		fmt.Fprintf(&b, "  against: %s\n", describeTimed(ops[id]))
	}
	if v.gap {
		amounts := make([]string, len(v.pending))
		for n, id := range v.pending {
			amounts[n] = strconv.FormatInt(ops[id].Input.(input).n, 10)
		}
		fmt.Fprintf(&b, "  increments of unknown outcome called by then: %d, adding %s\n", len(v.pending), strings.Join(amounts, ", "))
		for n, id := range v.pending {
			if n == 8 {
				fmt.Fprintf(&b, "    … and %d more\n", len(v.pending)-n)
				break
			}
			fmt.Fprintf(&b, "    %s\n", describeTimed(ops[id]))
		}
	}
	if last := lastNote(notes, v.at); last != nil {
		fmt.Fprintf(&b, "  last fault before it: %s [from %.3f s]\n", last.Description, float64(last.Start)/1e9)
	}
	return b.String()
}

// lastNote is the annotation (fault) that began last, no later than at.
func lastNote(notes []porcupine.Annotation, at int64) *porcupine.Annotation {
	var last *porcupine.Annotation
	for n := range notes {
		if notes[n].Start <= at && (last == nil || notes[n].Start > last.Start) {
			last = &notes[n]
		}
	}
	return last
}
