"""Where a tuned model's errors are, as a section of project/RESULTS.md: from the scores that
`spacy fofe evaluate --output` wrote, P/R/F per level (outer, inner, strict), what became of each
level's gold spans (found, found on the other level, or why not), recall and precision of the spans
whose text is a training span with their label against the rest (`--train` given to evaluate) and
P/R/F per label (with its recall on the seen and the unseen spans).

    python scripts/errors.py metrics/germeval-dev.json --model training/germeval/model-tuned \
        --data corpus/germeval/dev.spacy --config ../configs/germeval.cfg --section "Errors on germeval"
"""

import argparse
import json
from pathlib import Path

from results import RESULTS, write_section

LEVELS = ("outer", "inner", "strict")


def report(scores: dict, model: str, data: str, key: str, config: str) -> str:
    prefix = f"spans_{key}"
    trained = f" (trained with `{config}`, decoding tuned on dev)" if config else ""
    fates = scores.get(f"{prefix}_gold_fates") or {}
    # As `fofe evaluate` decided (inner spans in gold or predictions); older score files lack the flag.
    inner = bool(sum(fates.get("inner", {}).values()) or scores.get(f"{prefix}_inner_p"))
    flat = not scores.get(f"{prefix}_nested", inner)
    levels = ("span P/R/F (flat data: one level)" if flat else "span P/R/F per level (strict: both levels, each span "
              "counted on its own level, GermEval 2014's official metric)")
    lines = [f"`spacy fofe evaluate {model} {data}`{trained}: {levels} under `{key}`, what became of each level's "
             "gold spans (`fofe evaluate` prints the same table; \"other level\": e.g. an inner span predicted as "
             "outer because its outer span was missed) and P/R/F per label over all levels.", "",
             "| level | P | R | F |", "|---|---|---|---|"]
    lines += [f"| {level} | " + " | ".join(f"{100 * (scores.get(f'{prefix}_{level}_{m}') or 0.0):.2f}" for m in "prf")
              + " |" for level in (LEVELS[:1] if flat else LEVELS)]  # flat: strict is outer, inner is empty
    if fates:
        names = list(next(iter(fates.values())))
        lines += ["", "| gold spans | all | " + " | ".join(names) + " |", "|---|" + "---|" * (len(names) + 1)]
        for level, counts in fates.items():
            total = sum(counts.values())
            if total:  # flat data has no inner row
                cells = [f"{counts[name]:,} ({100 * counts[name] / total:.1f}%)" for name in names]
                lines.append(f"| {level} | {total:,} | " + " | ".join(cells) + " |")
    seen = scores.get(f"{prefix}_seen")
    if seen:
        lines += ["", "Over all levels, by whether a span's text is a span of the training data (`fofe evaluate "
                  "--train`): with its label (\"seen\"), with other labels only, or not at all; recall of the gold "
                  "spans, precision of the predictions.",
                  "", "| text in training | gold | R | predicted | P |", "|---|---|---|---|---|"]
        for category, counts in seen.items():
            lines.append(f"| {category} | {counts['gold']:,} | {_recall(counts)} | {counts['predicted']:,} | "
                         f"{_percent(counts['correct'], counts['predicted'])} |")
    per_type = scores.get(f"{prefix}_per_type") or {}
    seen_per_type = scores.get(f"{prefix}_seen_per_type") or {}
    if per_type:
        extra = " R seen | R unseen |" if seen_per_type else ""
        lines += ["", "| label | P | R | F |" + extra, "|---|---|---|---|" + "---|" * (2 if extra else 0)]
        for label, s in sorted(per_type.items()):
            cells = [f"{100 * s[m]:.2f}" for m in "prf"]
            if seen_per_type:
                cells += [_recall(seen_per_type.get(label, {}).get(category)) for category in ("seen", "unseen")]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _recall(counts) -> str:
    """Recall of a seen/unseen category's counts, "-" without gold spans."""
    return _percent(counts["found"], counts["gold"]) if counts else "-"


def _percent(part: int, whole: int) -> str:
    """part / whole as a percent with two decimals, "-" when whole is 0."""
    return f"{100 * part / whole:.2f}" if whole else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scores", help="the JSON file `spacy fofe evaluate --output` wrote")
    parser.add_argument("--model", required=True, help="the pipeline it evaluated (for the section's text)")
    parser.add_argument("--data", required=True, help="the data it evaluated on (for the section's text)")
    parser.add_argument("--section", required=True, help="the section's title")
    parser.add_argument("--config", default="", help="the config the model was trained with (for the section)")
    parser.add_argument("--spans-key", default="sc")
    parser.add_argument("--results", default=str(RESULTS), help="the results file whose section this rewrites")
    args = parser.parse_args()
    scores = json.loads(Path(args.scores).read_text(encoding="utf8"))
    if f"spans_{args.spans_key}_gold_fates" not in scores:
        parser.error(f"{args.scores} has no spans_{args.spans_key}_gold_fates: write it with `spacy fofe evaluate "
                     "--output`, not `spacy evaluate`")
    write_section(args.section, report(scores, args.model, args.data, args.spans_key, args.config),
                  configs=[args.config] if args.config else [], path=Path(args.results), raw=Path(args.scores))


if __name__ == "__main__":
    main()
