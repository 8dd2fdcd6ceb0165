package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// runStudy is the "study" sub-command: it draws the figures of
// docs/colocation-study.md from results.json files of earlier runs, each
// given as LABEL=PATH (the label prefixes its configurations):
//
//	colocation study --out docs before=/tmp/before/results.json after=/tmp/after/results.json
//
// colocation-waits.png: for every configuration, what the server's and the
// load generator's threads waited behind, per second of load (medians over
// repetitions); colocation-ratios.png: the p99 ratio to the server alone and
// the best-effort share, median and spread, per scenario and configuration.
func runStudy(args []string) error {
	fs := flag.NewFlagSet("study", flag.ContinueOnError)
	out := fs.String("out", "docs", "directory for the PNGs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	type labelled struct {
		label string
		runs  []runResult
	}
	var sets []labelled
	for _, arg := range fs.Args() {
		label, path, ok := strings.Cut(arg, "=")
		if !ok {
			return fmt.Errorf("argument %q: want LABEL=results.json", arg)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var file struct {
			Runs []runResult `json:"runs"`
		}
		if err := json.Unmarshal(data, &file); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		sets = append(sets, labelled{label, file.Runs})
	}
	if len(sets) == 0 {
		return errors.New("no results given")
	}
	var groups []waitGroup
	var ratios []ratioBar
	for _, s := range sets {
		groups = append(groups, waitGroups(s.label, s.runs)...)
		ratios = append(ratios, ratioBars(s.label, s.runs)...)
	}
	if err := drawWaits(filepath.Join(*out, "colocation-waits.png"), groups); err != nil {
		return err
	}
	return drawRatios(filepath.Join(*out, "colocation-ratios.png"), ratios)
}

// waitGroup is one configuration's median waits per second of load, by
// culprit, for the server and for the load generator.
type waitGroup struct {
	name            string
	server, loadgen map[string]float64 // culprit -> ms of waiting per second
}

// culpritOrder is the stacking order of the figures.
var culpritOrder = []string{"revocable", "server", "load generator", "host", "agent", "supervisors", "kernel", "idle", "unknown"}

func waitGroups(label string, runs []runResult) []waitGroup {
	type key struct{ scenario, config string }
	byKey := map[key][]runResult{}
	var keys []key
	for _, r := range runs {
		k := key{r.Scenario, r.Config}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	var out []waitGroup
	for _, k := range keys {
		for _, ph := range []struct {
			name string
			pick func(runResult) phase
		}{{"alone", func(r runResult) phase { return r.Alone }}, {"beside", func(r runResult) phase { return r.Shared }}} {
			name := fmt.Sprintf("%s: %s, %s, %s", label, k.scenario, k.config, ph.name)
			g := waitGroup{name: name, server: map[string]float64{}, loadgen: map[string]float64{}}
			for _, culprit := range culpritOrder {
				var s, l []float64
				for _, r := range byKey[k] {
					p := ph.pick(r)
					if p.Seconds <= 0 {
						continue
					}
					s = append(s, float64(p.Delays[culprit])/float64(time.Millisecond)/p.Seconds)
					l = append(l, float64(p.LoadgenDelays[culprit])/float64(time.Millisecond)/p.Seconds)
				}
				g.server[culprit], g.loadgen[culprit] = median(s), median(l)
			}
			out = append(out, g)
		}
	}
	return out
}

var culpritColors = map[string]color.Color{
	"revocable":      color.RGBA{213, 94, 0, 255},
	"server":         color.RGBA{0, 114, 178, 255},
	"load generator": color.RGBA{86, 180, 233, 255},
	"host":           color.RGBA{120, 120, 120, 255},
	"agent":          color.RGBA{0, 158, 115, 255},
	"supervisors":    color.RGBA{240, 228, 66, 255},
	"kernel":         color.RGBA{204, 121, 167, 255},
	"idle":           color.RGBA{230, 159, 0, 255},
	"unknown":        color.RGBA{200, 200, 200, 255},
}

// drawWaits draws, for the server and the load generator one above the
// other, a horizontal stacked bar per configuration: ms of run-queue wait
// per second of load, by culprit.
func drawWaits(path string, groups []waitGroup) error {
	panel := func(title string, pick func(waitGroup) map[string]float64) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "run-queue wait, ms per second of load (median of repetitions)"
		names := make([]string, len(groups))
		for i, g := range groups {
			names[len(groups)-1-i] = g.name
		}
		p.NominalY(names...)
		var prev *plotter.BarChart
		for _, culprit := range culpritOrder {
			values := make(plotter.Values, len(groups))
			for i, g := range groups {
				values[len(groups)-1-i] = pick(g)[culprit]
			}
			bars, err := plotter.NewBarChart(values, vg.Points(10))
			if err != nil {
				return nil, err
			}
			bars.Horizontal = true
			bars.Color = culpritColors[culprit]
			bars.LineStyle.Width = 0
			if prev != nil {
				bars.StackOn(prev)
			}
			prev = bars
			p.Add(bars)
			p.Legend.Add(culprit, bars)
		}
		p.Legend.Top = true
		p.Legend.Left = false
		return p, nil
	}
	server, err := panel("what the server's threads waited behind", func(g waitGroup) map[string]float64 { return g.server })
	if err != nil {
		return err
	}
	loadgen, err := panel("what the load generator's threads waited behind", func(g waitGroup) map[string]float64 { return g.loadgen })
	if err != nil {
		return err
	}
	height := vg.Length(1.2+0.28*float64(len(groups))) * vg.Inch
	img := vgimg.New(9*vg.Inch, 2*height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{server}, {loadgen}}, tiles, dc)
	server.Draw(canvases[0][0])
	loadgen.Draw(canvases[1][0])
	return savePNG(img, path)
}

// ratioBar is one configuration's p99 ratio and best-effort share.
type ratioBar struct {
	name         string
	ratio, share []float64
}

func ratioBars(label string, runs []runResult) []ratioBar {
	var out []ratioBar
	seen := map[string]bool{}
	for _, r := range runs {
		name := label + ": " + r.Scenario + ", " + r.Config
		if seen[name] {
			continue
		}
		seen[name] = true
		c := collect(runs, r.Scenario, r.Config)
		out = append(out, ratioBar{name: name, ratio: c.ratio, share: c.share})
	}
	return out
}

// drawRatios draws the p99 ratios (left) and best-effort shares (right),
// median bars with min-max whiskers.
func drawRatios(path string, bars []ratioBar) error {
	names := make([]string, len(bars))
	for i, b := range bars {
		names[len(bars)-1-i] = b.name
	}
	panel := func(title, xlabel string, pick func(ratioBar) []float64, goal float64) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = xlabel
		p.NominalY(names...)
		values := make(plotter.Values, len(bars))
		var whiskers plotter.XErrors
		var centres plotter.XYs
		for i, b := range bars {
			j := len(bars) - 1 - i
			vs := pick(b)
			values[j] = median(vs)
			if len(vs) > 0 {
				centres = append(centres, plotter.XY{X: values[j], Y: float64(j)})
				whiskers = append(whiskers, struct{ Low, High float64 }{values[j] - slices.Min(vs), slices.Max(vs) - values[j]})
			}
		}
		chart, err := plotter.NewBarChart(values, vg.Points(10))
		if err != nil {
			return nil, err
		}
		chart.Horizontal = true
		chart.Color = color.RGBA{0, 114, 178, 255}
		chart.LineStyle.Width = 0
		p.Add(chart)
		if len(centres) > 0 {
			errs, err := plotter.NewXErrorBars(struct {
				plotter.XYer
				plotter.XErrorer
			}{centres, whiskers})
			if err != nil {
				return nil, err
			}
			p.Add(errs)
		}
		line, err := plotter.NewLine(plotter.XYs{{X: goal, Y: -0.5}, {X: goal, Y: float64(len(bars)) - 0.5}})
		if err != nil {
			return nil, err
		}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		line.Color = color.RGBA{213, 94, 0, 255}
		p.Add(line)
		return p, nil
	}
	ratio, err := panel("server p99 / p99 alone (goal <= 1.2)", "ratio: median, min-max", func(b ratioBar) []float64 { return b.ratio }, 1.2)
	if err != nil {
		return err
	}
	share, err := panel("best-effort cores / idle cores (goal >= 0.5)", "share: median, min-max", func(b ratioBar) []float64 { return b.share }, 0.5)
	if err != nil {
		return err
	}
	height := vg.Length(1.0+0.3*float64(len(bars))) * vg.Inch
	img := vgimg.New(12*vg.Inch, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadLeft: vg.Points(6), PadRight: vg.Points(6), PadTop: vg.Points(6), PadBottom: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{ratio, share}}, tiles, dc)
	ratio.Draw(canvases[0][0])
	// The share panel repeats the names; drop them there.
	share.HideY()
	share.Draw(canvases[0][1])
	return savePNG(img, path)
}
