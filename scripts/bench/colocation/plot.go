package main

import (
	"cmp"
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var palette = []color.Color{
	color.RGBA{0, 114, 178, 255}, color.RGBA{213, 94, 0, 255}, color.RGBA{0, 158, 115, 255},
	color.RGBA{204, 121, 167, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{86, 180, 233, 255},
}

// drawScenario draws one scenario's runs of the repetition whose first QoS
// set had the median p99 ratio: the server's p99 per second (best-effort
// work runs in every other slice, the shaded seconds), and the revocable
// subtree's CPUs and CPU limit, one panel above the other.
func drawScenario(path, scenarioName string, results []runResult) error {
	rep := medianRep(scenarioName, results)
	var runs []runResult
	for _, r := range results {
		if r.Rep == rep && r.Scenario == scenarioName {
			runs = append(runs, r)
		}
	}
	latency := plot.New()
	latency.Title.Text = fmt.Sprintf("%s: server p99 per second (repetition %d; best-effort work runs in the shaded seconds)", scenarioName, rep+1)
	latency.X.Label.Text = "time (s)"
	latency.Y.Label.Text = "p99 latency (ms)"
	limit := plot.New()
	limit.Title.Text = "revocable subtree: CPUs it may use (solid), CPU limit in cores (dashed, 0 = none)"
	limit.X.Label.Text = "time (s)"
	limit.Y.Label.Text = "CPUs / cores"
	var top float64
	for _, r := range runs {
		for _, p := range r.Timeline {
			top = max(top, float64(p.P99.Microseconds())/1000)
		}
	}
	if len(runs) > 0 {
		var shade plotter.XYs
		for _, p := range runs[0].Timeline {
			if p.Shared {
				x := p.At.Seconds()
				shade = append(shade, plotter.XY{X: x, Y: 0}, plotter.XY{X: x, Y: top}, plotter.XY{X: x + 1, Y: top}, plotter.XY{X: x + 1, Y: 0})
			}
		}
		if len(shade) > 0 {
			poly, err := plotter.NewPolygon(shade)
			if err != nil {
				return err
			}
			poly.Color = color.RGBA{230, 230, 230, 255}
			poly.LineStyle.Width = 0
			latency.Add(poly)
		}
	}
	for i, r := range runs {
		lat, lim, cpus := make(plotter.XYs, len(r.Timeline)), make(plotter.XYs, len(r.Timeline)), make(plotter.XYs, len(r.Timeline))
		for j, p := range r.Timeline {
			x := p.At.Seconds() + 0.5
			lat[j] = plotter.XY{X: x, Y: float64(p.P99.Microseconds()) / 1000}
			lim[j] = plotter.XY{X: x, Y: p.Limit}
			cpus[j] = plotter.XY{X: x, Y: float64(p.CPUs)}
		}
		c := palette[i%len(palette)]
		if err := addLine(latency, lat, c, r.Config, false); err != nil {
			return err
		}
		if err := addLine(limit, cpus, c, r.Config, false); err != nil {
			return err
		}
		if err := addLine(limit, lim, c, "", true); err != nil {
			return err
		}
	}
	latency.Legend.Top = true
	img := vgimg.New(9*vg.Inch, 6*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{latency}, {limit}}, tiles, dc)
	latency.Draw(canvases[0][0])
	limit.Draw(canvases[1][0])
	return savePNG(img, path)
}

func addLine(p *plot.Plot, xys plotter.XYs, c color.Color, legend string, dashed bool) error {
	line, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("plot %s: %w", legend, err)
	}
	line.Color = c
	line.Width = vg.Points(1.5)
	if dashed {
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(line)
	if legend != "" {
		p.Legend.Add(legend, line)
	}
	return nil
}

// medianRep returns the repetition whose first non-noop configuration of
// the scenario had the median p99 ratio.
func medianRep(scenarioName string, results []runResult) int {
	type repRatio struct {
		rep   int
		ratio float64
	}
	var rr []repRatio
	first := ""
	for _, r := range results {
		if r.Scenario != scenarioName || r.Config == "noop" {
			continue
		}
		if first == "" {
			first = r.Config
		}
		if r.Config == first {
			rr = append(rr, repRatio{r.Rep, r.ratio()})
		}
	}
	if len(rr) == 0 {
		return 0
	}
	slices.SortFunc(rr, func(a, b repRatio) int { return cmp.Compare(a.ratio, b.ratio) })
	return rr[len(rr)/2].rep
}
