package dashboard

import (
	"fmt"
)

// chartMinutes is how many minutes the queues page's chart draws: the last
// hour.
const chartMinutes = 60

// minute is how many jobs of a queue succeeded and failed in a minute.
type minute struct {
	Succeeded, Failed int64
}

// The chart's geometry, in SVG user units: a bar a minute, the latest on
// the right.
const (
	barStep  = 8  // from one bar to the next
	barWidth = 6  // a bar
	plotTop  = 4  // above the tallest bar
	plotH    = 48 // the tallest bar
	chartW   = chartMinutes * barStep
	axisY    = plotTop + plotH // the baseline
	chartH   = axisY + 16      // the baseline and the labels under it
	minBarH  = 1.5             // a bar of one job stays visible
)

// chartView is a queue's chart as the template draws it.
type chartView struct {
	Width, Height, AxisY, LabelY int
	// Bars are the parts of bars with jobs, succeeded under failed.
	Bars []bar
	// Succeeded and Failed are the hour's totals, Peak the most jobs in a
	// minute.
	Succeeded, Failed, Peak int64
	// Cut says the minutes count a bounded sample that reaches back less
	// than the hour.
	Cut bool
}

// bar is a rectangle of the chart.
type bar struct {
	X, Y, W, H float64
	// Class is "ok" (succeeded) or "bad" (failed).
	Class string
	Title string
}

// Chart lays out the queue's last hour: one bar a minute, its height the
// jobs that finished then, succeeded at the bottom and failed on top, all
// scaled to the busiest minute.
func (l *queueLine) Chart() chartView {
	v := chartView{Width: chartW, Height: chartH, AxisY: axisY, LabelY: chartH - 2, Cut: l.Cut}
	for _, m := range l.Minutes {
		v.Succeeded += m.Succeeded
		v.Failed += m.Failed
		v.Peak = max(v.Peak, m.Succeeded+m.Failed)
	}
	if v.Peak == 0 {
		return v
	}
	height := func(n int64) float64 {
		if n == 0 {
			return 0
		}
		return max(minBarH, float64(n)*plotH/float64(v.Peak))
	}
	for ago := chartMinutes - 1; ago >= 0; ago-- { // left to right
		m := l.Minutes[ago]
		x := float64((chartMinutes-1-ago)*barStep + (barStep-barWidth)/2)
		when := fmt.Sprintf("%d–%d minutes ago", ago, ago+1)
		if ago == 0 {
			when = "in the last minute"
		}
		y := float64(axisY)
		for _, part := range []struct {
			n     int64
			class string
			what  string
		}{{m.Succeeded, "ok", "succeeded"}, {m.Failed, "bad", "failed"}} {
			if part.n == 0 {
				continue
			}
			h := height(part.n)
			y -= h
			v.Bars = append(v.Bars, bar{X: x, Y: y, W: barWidth, H: h, Class: part.class,
				Title: fmt.Sprintf("%s %s %s", num(part.n), part.what, when)})
		}
	}
	return v
}
