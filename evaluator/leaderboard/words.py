"""The leaderboard pages' words (Chinese first, English on `?lang=en`), number formats and their small CSS."""

from __future__ import annotations

from services.web import Catalog, escape

WORDS = Catalog(
    {
        "leaderboard": ("奖励模型排行榜", "Reward model leaderboard"),
        "home": ("排行榜", "Leaderboard"),
        "api": ("JSON 接口", "JSON API"),
        "rank": ("排名", "Rank"),
        "model": ("模型", "Model"),
        "dataset": ("数据集配方", "Dataset"),
        "dataset_id": ("数据集", "Dataset id"),
        "training_data": ("训练数据", "Training data"),
        "supervisor": ("远程监督模型", "Distant supervisor"),
        "no_details": (
            "该数据集早于构建记录（迁移 0009），没有各步骤的记录。",
            "This dataset predates build records (store revision 0009): no per-step record.",
        ),
        "step": ("步骤", "Step"),
        "settings": ("设置", "Settings"),
        "source": ("来源", "Source"),
        "before": ("处理前", "Before"),
        "after": ("处理后", "After"),
        "rule_filtered": ("规则过滤（未标注）的回答", "Responses kept out by the rule filter"),
        "ai_relations": ("AI 标注关系（远程监督）", "AI relations (distant supervision)"),
        "recipe": ("训练配方", "Training recipe"),
        "reported_to": ("训练记录", "Training reported to"),
        "state": ("状态", "State"),
        "candidate": ("候选", "candidate"),
        "evaluated": ("已评测", "evaluated"),
        "production": ("生产中", "production"),
        "rejected": ("已拒绝", "rejected"),
        "retired": ("已退役", "retired"),
        "registered_elsewhere": ("外部注册", "registered from a directory"),
        "overall": ("总分", "Overall"),
        "acc": ("准确率", "Acc."),
        "exact": ("完全匹配", "Exact."),
        "ece": ("ECE", "ECE"),
        "mean": ("(准确率+完全匹配)/2", "(Acc.+Exact.)/2"),
        "prompts": ("提示数", "Prompts"),
        "pairs": ("比较对数", "Pairs"),
        "status": ("评测状态", "Evaluation"),
        "running": ("评测中", "running"),
        "succeeded": ("已完成", "done"),
        "failed": ("失败", "failed"),
        "not_evaluated": ("未评测", "not evaluated"),
        "no_models": ("还没有评测过的模型。", "No model has been evaluated yet."),
        "compare": ("对比两个模型", "Compare two models"),
        "compare_go": ("对比", "Compare"),
        "per_category": ("各类别结果", "Per category"),
        "category": ("类别", "Category"),
        "subset": ("子集", "Subset"),
        "summary": ("各子集结果", "Per subset"),
        "chart": ("各类别准确率图", "Per-category chart"),
        "history": ("评测记录", "Run history"),
        "run": ("运行", "Run"),
        "started": ("开始时间", "Started"),
        "progress": ("进度", "Progress"),
        "bench": ("评测文件", "Bench files"),
        "semantics": ("平局规则", "Semantics"),
        "error": ("原因", "Reason"),
        "registered": ("注册时间", "Registered"),
        "unregistered": ("（未在注册表中）", "(not in the registry)"),
        "not_evaluated_yet": ("该模型还没有完成的评测。", "This model has no finished evaluation yet."),
        "difference": ("差值 (A − B)", "Difference (A − B)"),
        "disagree": ("两个模型分歧最大的提示", "Prompts where the models disagree most"),
        "disagree_note": (
            "分歧：金标准排序中的一对回答，恰有一个模型排对。",
            "A disagreement: a pair of responses with different gold ranks that exactly one model orders right.",
        ),
        "disagreements": ("分歧", "disagreements"),
        "right": ("排对", "right"),
        "no_disagreement": (
            "两个模型在共同评测的提示上没有分歧。",
            "The models never disagree on the prompts both scored.",
        ),
        "system_prompt": ("系统提示", "System prompt"),
        "response": ("回答", "Response"),
        "gold": ("金标准名次", "Gold rank"),
        "score": ("奖励", "reward"),
        "place": ("排序", "place"),
        "error_title": ("出错了", "Something is wrong"),
        "back": ("返回排行榜", "Back to the leaderboard"),
        "admin": ("管理员操作", "Admin"),
        "admin_note": (
            "把该模型设为生产模型：未指定模型的评分请求将由它回答；指定了模型的客户端不受影响。",
            "Make this model production: calls naming no model get its rewards; clients that pinned one keep theirs.",
        ),
        "admin_rollback_note": (
            "生产模型回到上一个生产模型（每一步都会记录在您的名下）。",
            "Production returns to the previous production model (each step is recorded under your name).",
        ),
        "admin_token": ("管理员令牌", "Admin token"),
        "admin_reason": ("原因", "Reason"),
        "admin_force": ("强制（已拒绝或已退役的模型）", "Force (a rejected or retired model)"),
        "admin_promote": ("设为生产模型", "Promote to production"),
        "admin_rollback": ("回滚生产模型", "Roll production back"),
    }
)

CSS = '<link rel="stylesheet" href="/static/leaderboard/leaderboard.css">'  # static/leaderboard.css


def table(table_id: str, head: str, rows: list[str]) -> str:
    """A `table.data` with header row(s) `head` and body `rows` (all HTML)."""
    return f'<table class="data" id="{table_id}"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def card(title: str, inner: str, classes: str = "") -> str:
    """A titled `.card` section (`title` is text, `inner` HTML)."""
    return f'<section class="card {classes}"><h2>{escape(title)}</h2>{inner}</section>'


def fmt(value: float | None, digits: int = 4) -> str:
    """A figure as the tables print it; "–" for a value that is undefined (no comparisons)."""
    return "–" if value is None else f"{value:.{digits}f}"


def num_cell(value: float | None, field: str, extra: str = "") -> str:
    """A right-aligned number cell; `data-value` holds the unrounded figure (for scripts and tests)."""
    raw = "" if value is None else repr(float(value))
    return f'<td class="num{extra}" data-field="{escape(field)}" data-value="{raw}">{fmt(value)}</td>'


def diff_cell(value: float | None, field: str) -> str:
    """A signed difference, green when A is ahead, red when B is."""
    if value is None:
        return num_cell(None, field)
    sign = " pos" if value > 0 else " neg" if value < 0 else ""
    raw = repr(float(value))
    text = f"{value:+.4f}" if value else fmt(0.0)  # no sign on a zero
    return f'<td class="num{sign}" data-field="{escape(field)}" data-value="{raw}">{text}</td>'
