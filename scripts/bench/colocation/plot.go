package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// drawPNG draws, per run, the server's per-second p99 latency, and the
// revocable subtree's CPU limit, one above the other, into a PNG.
func drawPNG(results []result, path string) error {
	colors := []color.Color{color.RGBA{0, 114, 178, 255}, color.RGBA{213, 94, 0, 255}, color.RGBA{0, 158, 115, 255}}
	latency := plot.New()
	latency.Title.Text = "latency-critical server: p99 per second"
	latency.X.Label.Text = "time (s)"
	latency.Y.Label.Text = "p99 latency (ms)"
	limit := plot.New()
	limit.Title.Text = "revocable subtree CPU limit (0 = none)"
	limit.X.Label.Text = "time (s)"
	limit.Y.Label.Text = "cores"
	for i, r := range results {
		lat, lim := make(plotter.XYs, len(r.timeline)), make(plotter.XYs, len(r.timeline))
		for j, p := range r.timeline {
			lat[j] = plotter.XY{X: p.at.Seconds(), Y: float64(p.p99.Microseconds()) / 1000}
			lim[j] = plotter.XY{X: p.at.Seconds(), Y: p.limit}
		}
		for _, target := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{latency, lat}, {limit, lim}} {
			line, err := plotter.NewLine(target.xys)
			if err != nil {
				return fmt.Errorf("plot %s: %w", r.name, err)
			}
			line.Color = colors[i%len(colors)]
			line.Width = vg.Points(1.5)
			target.p.Add(line)
			target.p.Legend.Add(r.name, line)
		}
	}
	latency.Legend.Top = true
	img := vgimg.New(10*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{latency}, {limit}}, tiles, dc)
	latency.Draw(canvases[0][0])
	limit.Draw(canvases[1][0])
	return savePNG(img, path)
}
