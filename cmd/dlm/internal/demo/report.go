package demo

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The report is written act by act, as the demo plays.

func (r *run) intro() {
	fmt.Fprintf(r.w, "dlm demo: %d service instances sell the last %s of a product\n", len(r.instances), items(r.cfg.Stock))
	fmt.Fprintf(r.w, "  dlm server   %s, in this process (one node, in-memory log); one session per instance\n", r.srv.Addr())
	fmt.Fprintf(r.w, "  database     %s %s\n", r.shop.kind(), r.shop.where())
	fmt.Fprintf(r.w, "  a purchase   read the stock, work %s, write stock-1, record an order\n", r.cfg.Work)
}

func (r *run) printAct(title string, a Act, locked bool) {
	fmt.Fprintf(r.w, "\n%s\n", title)
	fmt.Fprintf(r.w, "  %d instances sell product %s until they read a stock of 0 (or sold %d each)\n", a.Instances, a.Product, a.Stock)
	fmt.Fprintf(r.w, "  orders       %d for %s\n", a.Orders, items(a.Stock))
	fmt.Fprintf(r.w, "  stock left   %d\n", a.StockLeft)
	switch {
	case a.Oversold > 0:
		fmt.Fprintf(r.w, "  oversold     %d  <- sold items that did not exist\n", a.Oversold)
	case !locked:
		fmt.Fprintf(r.w, "  oversold     0  (the race was missed this time)\n")
	default:
		fmt.Fprintf(r.w, "  oversold     0\n")
	}
	if locked {
		fmt.Fprintf(r.w, "  tokens       %s (one per order, in order)\n", tokens(a.Tokens))
	}
	fmt.Fprintf(r.w, "  took         %s\n", round(a.Elapsed))
}

func (r *run) printFencing(f Fencing) {
	fmt.Fprintf(r.w, "\nAct 3: fencing tokens, a holder paused past its TTL\n")
	fmt.Fprintf(r.w, "  instance 1   acquires %q with token %d (TTL %s, no renewal), reads stock 1, pauses (GC)\n",
		f.Resource, f.StaleToken, f.TTL)
	fmt.Fprintf(r.w, "  instance 2   acquires it %s later with token %d, sells the last item: %s\n",
		round(f.TakeOver), f.FreshToken, verdict(f.FreshAccepted))
	lost := "its lease still valid"
	if f.StaleLost {
		lost = "its lease lost meanwhile"
	}
	fmt.Fprintf(r.w, "  instance 1   wakes after %s, %s, and writes with token %d: %s\n",
		round(f.Pause), lost, f.StaleToken, verdict(f.StaleAccepted))
	if !f.StaleAccepted {
		fmt.Fprintf(r.w, "               (written only where fence < %d; found fence = %d)\n", f.StaleToken, f.Fence)
	}
	fmt.Fprintf(r.w, "  orders       %d for 1 item, %d left, oversold %d\n", f.Orders, f.StockLeft, max(0, f.Orders-1))
	fmt.Fprintf(r.w, "  took         %s\n", round(f.Elapsed))
}

func (r *run) verdict(rep *Report) {
	fmt.Fprintln(r.w)
	if p := rep.Problems(); len(p) > 0 {
		for _, s := range p {
			fmt.Fprintf(r.w, "BUG: %s\n", s)
		}
		return
	}
	if rep.Unlocked.Oversold > 0 {
		fmt.Fprintf(r.w, "Without a lock, %s oversold; with dlm, none; the stale write was rejected. (%s)\n",
			items(rep.Unlocked.Oversold), round(rep.Elapsed))
	} else {
		fmt.Fprintf(r.w, "Without a lock nothing was oversold this time (the race was missed: try more -instances);\n"+
			"with dlm, none; the stale write was rejected. (%s)\n", round(rep.Elapsed))
	}
}

func verdict(accepted bool) string {
	if accepted {
		return "accepted"
	}
	return "REJECTED"
}

func items(n int) string {
	if n == 1 {
		return "1 item"
	}
	return strconv.Itoa(n) + " items"
}

// tokens lists tokens, eliding the middle of a long list.
func tokens(ts []uint64) string {
	var b strings.Builder
	for i, t := range ts {
		if len(ts) > 8 && i == 4 {
			fmt.Fprintf(&b, ", … (%d more)", len(ts)-6)
		}
		if len(ts) > 8 && i >= 4 && i < len(ts)-2 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(t, 10))
	}
	return b.String()
}

func round(d time.Duration) time.Duration {
	return d.Round(time.Millisecond)
}
