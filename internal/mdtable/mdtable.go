// Package mdtable prints tables as Markdown pipe tables with tablewriter: they read as aligned columns on a
// terminal and paste into a Markdown file as they are. The reports' tables go through Write; morphlab's
// row-at-a-time tables (newTable) and its trace stats, costmodel and calibrate tables build their own.
package mdtable

import (
	"io"
	"slices"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Write prints the header, then one line per row; a row shorter than the header is padded with empty cells.
func Write(w io.Writer, header []string, rows [][]string) error {
	t := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewMarkdown()),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithTrimSpace(tw.Off),
	)
	t.Header(header)
	for _, r := range rows {
		if len(r) < len(header) {
			r = append(slices.Clone(r), make([]string, len(header)-len(r))...)
		}
		if err := t.Append(r); err != nil {
			return err
		}
	}
	return t.Render()
}
