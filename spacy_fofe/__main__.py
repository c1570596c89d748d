"""Command line: `python -m spacy_fofe convert ...` (and the other commands of the package)."""

import argparse
import sys
from pathlib import Path

from . import convert as converters
from .tune import OBJECTIVES


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spacy_fofe")
    commands = parser.add_subparsers(dest="command", required=True)

    conv = commands.add_parser("convert", help="convert a column (IOB/BIO) or JSON lines corpus to .spacy")
    conv.add_argument("input", type=Path)
    conv.add_argument("output", type=Path)
    conv.add_argument("--format", choices=["columns", "jsonl"], default="columns")
    conv.add_argument("--token-column", type=int, default=0, help="column of the token (0-based; negative from end)")
    conv.add_argument("--tag-columns", default="-1",
                      help="comma-separated tag columns, outer level first (e.g. 2,3 for GermEval)")
    conv.add_argument("--scheme", choices=["iob1", "iob2"], default="iob2",
                      help="iob1 (CoNLL-2003) or iob2/BIO; in iob2 an I- that starts a span is counted as invalid")
    conv.add_argument("--separator", default=None,
                      help="column separator: 'tab', or any string (default: any whitespace)")
    conv.add_argument("--spans-key", default="sc")
    conv.add_argument("--no-ents", action="store_true", help="do not also write the outer level to doc.ents")
    conv.add_argument("--max-length", type=int, default=7, help="n, to report how many gold spans are longer")

    tune = commands.add_parser("tune", help="tune decoding thresholds and algorithms on dev; save the pipeline")
    tune.add_argument("model", type=Path, help="trained pipeline directory")
    tune.add_argument("dev", type=Path, help="dev .spacy file")
    tune.add_argument("output", type=Path, help="where to save the tuned pipeline")
    tune.add_argument("--component", default="fofe_ner")
    tune.add_argument("--objective", choices=list(OBJECTIVES), default="span",
                      help="maximise span F1 over all levels, or GermEval's strict level-aware F1")
    tune.add_argument("--no-label-thresholds", action="store_true",
                      help="search only each level's algorithm and threshold, no per-label thresholds")

    args = parser.parse_args(argv)
    if args.command == "tune":
        from .tune import tune_pipeline

        tune_pipeline(args.model, args.dev, args.output, args.component, objective=args.objective,
                      label_thresholds=not args.no_label_thresholds)
    if args.command == "convert":
        if args.format == "jsonl":
            records = converters.read_jsonl(args.input)
        else:
            columns = [int(c) for c in args.tag_columns.split(",")]
            separator = "\t" if args.separator in ("tab", "\\t") else args.separator
            records = converters.read_columns(args.input, args.token_column, columns, args.scheme, separator)
        try:
            report = converters.convert(records, args.output, args.spans_key, not args.no_ents, args.max_length)
        except (ValueError, OSError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        print(f"{args.input} -> {args.output}\n{report.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
