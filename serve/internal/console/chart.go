package console

import (
	"fmt"
	"slices"
	"time"

	"github.com/onceq/onceq"
)

// chart is one of the queue page's charts: a bar a minute over the last
// hour, drawn in an SVG of chartWidth by chartHeight with its axis named:
// the largest value at its top, half of it at its middle.
type chart struct {
	Bars     []chartBar
	Top, Mid string
}

// chartBar is one bar of a chart: a minute and its value; FH of its
// height, drawn at its top from FY, is the failed tasks' share of it.
type chartBar struct {
	X, Y, H int
	FY, FH  int
	Label   string
	Value   string
}

// The plot of a chart: chartLeft is the room for the axis's labels, and
// a bar's top is at chartTop for the largest value, its foot at
// chartTop+chartHeight.
const (
	chartMinutes = 60 // the span of the charts: the last hour
	chartLeft    = 40
	chartTop     = 10
	chartHeight  = 100
	chartBarStep = 10 // a bar and its gap
)

// perMinute groups the finished records of the last hour by the minute
// they finished in, oldest first.
func perMinute(recs []onceq.TaskRecord, now time.Time) [chartMinutes][]onceq.TaskRecord {
	var out [chartMinutes][]onceq.TaskRecord
	for _, rec := range recs {
		if m := int(now.Sub(rec.Finished) / time.Minute); !rec.Finished.IsZero() && m >= 0 && m < chartMinutes {
			out[chartMinutes-1-m] = append(out[chartMinutes-1-m], rec)
		}
	}
	return out
}

// bars draws one value a minute, and the failed part of it (nil: none),
// scaled to the largest value; whole values (counts) to the next even
// number, so that the axis's middle is a whole one too.
func bars(vals, failed *[chartMinutes]float64, now time.Time, whole bool, format func(float64) string) chart {
	top := 0.0
	for _, v := range vals {
		top = max(top, v)
	}
	if whole && int64(top)%2 == 1 {
		top++
	}
	c := chart{Bars: make([]chartBar, chartMinutes), Top: format(top), Mid: format(top / 2)}
	scale := func(v float64) int {
		if top == 0 {
			return 0
		}
		return int(v * chartHeight / top)
	}
	for i, v := range vals {
		h := scale(v)
		b := chartBar{X: chartLeft + i*chartBarStep, Y: chartTop + chartHeight - h, H: h, Value: format(v),
			Label: now.Add(-time.Duration(chartMinutes-1-i) * time.Minute).UTC().Format("15:04")}
		if failed != nil && failed[i] > 0 {
			b.FY, b.FH = b.Y, scale(failed[i])
			b.Value += fmt.Sprintf(", %.0f failed", failed[i])
		}
		c.Bars[i] = b
	}
	return c
}

// charts returns the queue page's charts from the tasks that finished in
// the last hour: how many finished each minute, the failed (dead) ones
// apart, and the 99th percentile of their time from enqueue to finish;
// and the hour's error rate, in words.
func charts(recs []onceq.TaskRecord, now time.Time) (count, p99 chart, errRate string) {
	var n, dead, lat [chartMinutes]float64
	total, failed := 0, 0
	for i, minute := range perMinute(recs, now) {
		n[i] = float64(len(minute))
		ds := make([]time.Duration, 0, len(minute))
		for _, r := range minute {
			if r.State == onceq.StateDead {
				dead[i]++
			}
			if !r.Enqueued.IsZero() {
				ds = append(ds, r.Finished.Sub(r.Enqueued))
			}
		}
		if len(ds) > 0 {
			slices.Sort(ds)
			lat[i] = ds[len(ds)*99/100].Seconds()
		}
		total += len(minute)
		failed += int(dead[i])
	}
	count = bars(&n, &dead, now, true, func(v float64) string {
		if v == 1 {
			return "1 task"
		}
		return fmt.Sprintf("%.0f tasks", v)
	})
	p99 = bars(&lat, nil, now, false, func(v float64) string {
		return time.Duration(v * float64(time.Second)).Round(time.Millisecond).String()
	})
	errRate = "none finished"
	if total > 0 {
		errRate = fmt.Sprintf("%.1f%% (%d of %d failed)", float64(failed)*100/float64(total), failed, total)
	}
	return count, p99, errRate
}
