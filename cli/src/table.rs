//! Plain aligned columns for human output, `kubectl`-style: an upper-case header row, two
//! spaces between columns, no borders, so the output also survives `grep` and `awk`.

/// Spaces between two columns.
const COLUMN_GAP: usize = 2;

/// Renders `rows` under `headers`, each column as wide as its widest cell. Every line ends
/// with a newline; the last column is not padded.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        debug_assert_eq!(row.len(), headers.len(), "a row must fill every column");
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header_cells: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header_cells).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths[i] - cell.chars().count() + COLUMN_GAP;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

/// Renders `label value` pairs with the values aligned, one pair a line.
pub fn render_pairs(pairs: &[(&str, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(label, _)| label.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (label, value) in pairs {
        out.push_str(label);
        let pad = width - label.chars().count() + COLUMN_GAP;
        out.extend(std::iter::repeat_n(' ', pad));
        out.push_str(value);
        out.push('\n');
    }
    out
}

/// Like [`render_pairs`], each line starting with `indent`, and values of several lines
/// continued under the first, aligned with it.
pub fn render_pairs_multiline(pairs: &[(&str, String)], indent: &str) -> String {
    let width = pairs
        .iter()
        .map(|(label, _)| label.chars().count())
        .max()
        .unwrap_or(0);
    let continuation = format!("{indent}{}", " ".repeat(width + COLUMN_GAP));
    let mut out = String::new();
    for (label, value) in pairs {
        out.push_str(indent);
        out.push_str(label);
        let pad = width - label.chars().count() + COLUMN_GAP;
        out.extend(std::iter::repeat_n(' ', pad));
        let mut lines = value.lines();
        out.push_str(lines.next().unwrap_or(""));
        out.push('\n');
        for line in lines {
            out.push_str(&continuation);
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let table = render(
            &["KEY", "TOKEN"],
            &[
                vec!["tasks/a".into(), "7".into()],
                vec!["t".into(), "1234".into()],
            ],
        );
        assert_eq!(table, "KEY      TOKEN\ntasks/a  7\nt        1234\n");
    }

    #[test]
    fn empty_table_is_just_the_header() {
        assert_eq!(render(&["ID", "ADDR"], &[]), "ID  ADDR\n");
    }

    #[test]
    fn multiline_pairs_continue_under_the_first_line() {
        let text =
            render_pairs_multiline(&[("done", "a\nb".into()), ("first step", "c".into())], "  ");
        assert_eq!(text, "  done        a\n              b\n  first step  c\n");
    }

    #[test]
    fn pairs_align_their_values() {
        let text = render_pairs(&[("token", "7".into()), ("remaining", "3.0s".into())]);
        assert_eq!(text, "token      7\nremaining  3.0s\n");
    }
}
