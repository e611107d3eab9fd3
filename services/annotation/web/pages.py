"""The annotator's page and the admin overview: server-rendered shells in Chinese or English, filled by
static/annotate.js and static/overview.js from the JSON API (`app`). The words live here, once.
"""

from __future__ import annotations

import json
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles

from services.web import Catalog, escape, layout, remember_language, request_language

STATIC = Path(__file__).resolve().parent / "static"
SCRIPTS = ["/static/web/page.js"]
NOTICE = '<div id="notice" class="notice hidden" role="status"></div>'

WORDS = Catalog(
    {
        "title": ("三元组排序标注", "Triple-wise ranking"),
        "admin_title": ("标注总览", "Annotation overview"),
        "nav_annotate": ("标注", "Annotate"),
        "nav_admin": ("总览（管理员）", "Overview (admin)"),
        "signin_title": ("登录", "Sign in"),
        "signin_help": (
            "请输入管理员为你生成的个人令牌（cheems annotators add 你的名字）。",
            "Enter the personal token your admin made for you (cheems annotators add YOUR-NAME).",
        ),
        "signin": ("登录", "Sign in"),
        "signout": ("退出", "Sign out"),
        "signed_in_as": ("当前标注员：", "Signed in as "),
        "done_here": ("本次已提交", "submitted this session"),
        "shortcuts": ("快捷键", "Shortcuts"),
        "system_prompt": ("系统提示", "System prompt"),
        "history": ("对话历史", "Earlier turns"),
        "role_user": ("用户", "User"),
        "role_assistant": ("助手", "Assistant"),
        "role_system": ("系统", "System"),
        "prompt": ("问题", "Prompt"),
        "response": ("回答", "Response"),
        "place": ("名次", "Place"),
        "discard": ("不可用", "Unusable"),
        "discarded": ("已标为不可用", "marked unusable"),
        "reset": ("重置", "Reset"),
        "submit": ("提交", "Submit"),
        "next": ("刷新任务", "Load next task"),
        "no_task": ("目前没有待标注的任务，稍后再来看看。", "No task is waiting for you now; check back later."),
        "withheld": (
            "还有 {} 个三元组任务，但都属于你已标注或正在标注的问题：同一问题的三元组须由不同标注员独立完成，"
            "这些留给其他标注员。",
            "{} open triples remain, but all belong to prompts you already annotated or hold: each triple of a "
            "prompt goes to a different annotator, so these are left for others.",
        ),
        "unranked": ("尚未排序：", "Not yet placed: "),
        "ranking": ("排序：", "Order: "),
        "all_discarded": ("三个回答都不可用", "All three responses unusable"),
        "unusable_list": ("（不可用：{}）", " (unusable: {})"),
        "submitted": ("已提交，下一个任务已载入。", "Submitted; the next task is loaded."),
        "already": (
            "这份标注已经提交过，没有重复保存。",
            "This annotation was already submitted; nothing was stored twice.",
        ),
        "reason_stale_task": (
            "你长时间未提交，这个任务已分配给其他标注员，本次标注未保存。",
            "You held this task too long and it was given to another annotator; this ranking was not stored.",
        ),
        "reason_task_completed": (
            "这个任务已经完成（由其他标注员，或你在另一个窗口提交），本次标注未保存。",
            "This task was already completed (by another annotator, or by you in another window); "
            "this ranking was not stored.",
        ),
        "reason_unauthenticated": ("令牌无效，请重新登录。", "The token is not valid; please sign in again."),
        "reason_forbidden": ("无权访问：此内容不属于你。", "Not allowed: this is not yours."),
        "reason_unreachable": ("无法连接服务，请稍后重试。", "The service cannot be reached; try again shortly."),
        "help_select": ("选择回答 A / B / C", "Select response A / B / C"),
        "help_move": ("上一个 / 下一个回答", "Previous / next response"),
        "help_place": (
            "给所选回答第 1 / 2 / 3 名（名次相同即并列）",
            "Give the selected response place 1 / 2 / 3 (same place = tie)",
        ),
        "help_clear": ("清除所选回答的名次", "Clear the selected response's place"),
        "help_discard": ("标记 / 取消不可用", "Mark / unmark as unusable"),
        "help_reset": ("重置全部", "Reset everything"),
        "help_submit": ("提交", "Submit"),
        "help_next": ("载入下一个任务", "Load the next task"),
        "help_help": ("显示 / 隐藏快捷键", "Show / hide shortcuts"),
        "col_name": ("标注员", "Annotator"),
        "col_open": ("手上任务", "Held"),
        "col_idle": ("超时未动", "Past lease"),
        "col_oldest": ("最久未动（分钟）", "Oldest (min)"),
        "col_done": ("已完成", "Done"),
        "col_agreement": ("与最终排序一致率", "Agreement with rankings"),
        "col_cycles": ("处于冲突环的标注占比", "Share on cycles"),
        "col_account": ("账号", "Account"),
        "col_note": ("提示", "Note"),
        "account_admin": ("管理员", "admin"),
        "account_active": ("有效", "active"),
        "account_disabled": ("已停用", "disabled"),
        "account_none": ("无网页账号", "no web account"),
        "flag": ("需关注", "check"),
        "queue": ("待标注三元组任务：", "Open triple-wise tasks: "),
        "queue_free": ("其中未领取：", "not yet given out: "),
        "unfinishable": (
            "有 {prompts} 个问题无法完成：按当前规则（people_per_prompt={rule}）一个问题最多需要 {needed} 位"
            "不同的标注员，而能标注的有效账号只有 {accounts} 个。请把 --people-per-prompt 设为 {accounts}，"
            "或添加标注员账号。",
            "{prompts} prompts cannot be finished: under the rule (people_per_prompt={rule}) one needs up to {needed} "
            "different people, and {accounts} active accounts annotate. Set the service's --people-per-prompt "
            "{accounts}, or add annotator accounts.",
        ),
        "doubles_title": ("双人独立标注", "Double annotation"),
        "doubles_summary": (
            "两份都已完成的双份三元组：{triples}；比较的两两关系：{compared}；一致率：{agreement}（论文目标 {target}）",
            "Doubled triples with both copies annotated: {triples}; pairwise relations compared: {compared}; "
            "agreement: {agreement} (the paper's target: {target})",
        ),
        "doubles_none": (
            "尚无两份都已完成的双份三元组（用 cheems service annotation --double-share 开启双人标注）。",
            "No doubled triple has both copies annotated yet (cheems service annotation --double-share turns "
            "double annotation on).",
        ),
        "filtered_title": ("规则过滤", "Rule filter"),
        "filtered_none": (
            "没有回答被规则过滤（过长、空白或中文比例过低的回答不进入标注任务）。",
            "No response was kept out by the rule filter (overlong, empty or mostly non-Chinese responses get "
            "no task).",
        ),
        "filtered_summary": ("未进入标注任务的回答：", "Responses kept out of annotation: "),
        "col_prompt": ("提示", "Prompt"),
        "col_response": ("回答", "Response"),
        "col_reason": ("规则", "Rule"),
        "col_excerpt": ("开头", "Beginning"),
        "below_target": ("低于目标", "below target"),
        "col_pair": ("标注员组合", "Annotator pair"),
        "col_triples": ("三元组", "Triples"),
        "col_compared": ("比较的关系", "Relations compared"),
        "col_pair_agreement": ("一致率", "Agreement"),
        "overview_help": (
            "一致率：标注员的两两关系中与最终排序一致的比例；冲突环占比：含有处于偏好环上的偏好的标注比例。"
            "一致率低于 70% 或冲突环占比高于 30% 的标注员会被标记。",
            "Agreement: the share of an annotator's pairwise relations the resolved ranking keeps; share on "
            "cycles: the share of their annotations with a preference on a cycle. Below 70% agreement or above "
            "30% on cycles is flagged.",
        ),
    }
)


def json_script(element_id: str, value: object) -> str:
    """`value` as JSON a script reads from the page (`</` escaped so it cannot close the tag)."""
    data = json.dumps(value, ensure_ascii=False).replace("</", "<\\/")
    return f'<script id="{element_id}" type="application/json">{data}</script>'


def nav(lang: str) -> list[tuple[str, str]]:
    return [("/annotate", WORDS.text("nav_annotate", lang)), ("/admin", WORDS.text("nav_admin", lang))]


def signin_form(lang: str) -> str:
    w = WORDS.table(lang)
    return (
        f'<section id="signin" class="card hidden"><h2>{escape(w["signin_title"])}</h2>'
        f'<p class="muted">{escape(w["signin_help"])}</p><form id="signin-form">'
        '<input type="password" id="token" autocomplete="off" placeholder="chm_…" aria-label="token"> '
        f'<button class="primary" type="submit">{escape(w["signin"])}</button></form></section>'
    )


def toolbar(lang: str, counter: bool) -> str:
    w = WORDS.table(lang)
    count = f' <span class="badge" id="count" title="{escape(w["done_here"])}">0</span>' if counter else ""
    helper = f' <button id="help-toggle" type="button">{escape(w["shortcuts"])} <kbd>?</kbd></button>' * counter
    return (
        f'<div class="toolbar"><span>{escape(w["signed_in_as"])}<b id="who"></b></span>{count}'
        f'<span class="spacer"></span>{helper} <button id="signout" type="button">{escape(w["signout"])}</button>'
        "</div>"
    )


def annotator_body(lang: str) -> str:
    w = WORDS.table(lang)
    keys = [
        ("A B C", "help_select"),
        ("← →", "help_move"),
        ("1 2 3", "help_place"),
        ("0", "help_clear"),
        ("X", "help_discard"),
        ("R", "help_reset"),
        ("Enter", "help_submit"),
        ("N", "help_next"),
        ("?", "help_help"),
    ]
    rows = "".join(
        f"<tr><td>{''.join(f'<kbd>{escape(k)}</kbd> ' for k in combo.split())}</td><td>{escape(w[key])}</td></tr>"
        for combo, key in keys
    )
    return (
        NOTICE
        + signin_form(lang)
        + '<section id="work" class="hidden">'
        + toolbar(lang, counter=True)
        + f'<aside id="help" class="card hidden"><h3>{escape(w["shortcuts"])}</h3><table>{rows}</table></aside>'
        + f'<div id="empty" class="card hidden"><p>{escape(w["no_task"])}</p><p id="withheld" class="hidden"></p>'
        f'<button id="reload" type="button">{escape(w["next"])} <kbd>N</kbd></button></div>'
        '<div id="task" class="hidden"><article class="card prompt">'
        '<div id="category" class="categories"></div>'
        f'<details id="system" class="hidden" open><summary>{escape(w["system_prompt"])}</summary>'
        '<div class="md" id="system-text"></div></details>'
        f'<div id="history" class="hidden"><h3>{escape(w["history"])}</h3><div id="turns"></div></div>'
        f'<h2>{escape(w["prompt"])}</h2><div id="prompt" class="md"></div></article>'
        '<div class="card submitbar"><span id="summary"></span><span class="spacer"></span>'
        f'<button id="reset" type="button">{escape(w["reset"])} <kbd>R</kbd></button> '
        f'<button id="submit" type="button" class="primary" disabled>{escape(w["submit"])} <kbd>Enter</kbd></button>'
        '</div><div class="grid-3" id="responses"></div></div></section>' + json_script("words", w)
    )


def admin_body(lang: str) -> str:
    w = WORDS.table(lang)
    return (
        NOTICE
        + signin_form(lang)
        + '<section id="work" class="hidden">'
        + toolbar(lang, counter=False)
        + '<p id="queue"></p><p id="unfinishable" class="flagged hidden"></p>'
        '<table class="data" id="annotators"><thead></thead><tbody></tbody></table>'
        f'<p class="muted">{escape(w["overview_help"])}</p>'
        f'<section id="doubles"><h3>{escape(w["doubles_title"])}</h3><p id="doubles-summary"></p>'
        '<table class="data hidden" id="pairs"><thead></thead><tbody></tbody></table></section>'
        f'<section id="rule-filter"><h3>{escape(w["filtered_title"])}</h3><p id="filtered-summary"></p>'
        '<table class="data hidden" id="filtered"><thead></thead><tbody></tbody></table></section></section>'
        + json_script("words", w)
    )


def page(request: Request, title_key: str, body: str, script: str) -> Response:
    lang = request_language(request)
    head = '<link rel="stylesheet" href="/static/annotation/annotate.css">'
    html = layout(WORDS.text(title_key, lang), body, lang, scripts=[*SCRIPTS, script], nav=nav(lang), head_html=head)
    return remember_language(HTMLResponse(html), lang)


async def annotator_page(request: Request) -> Response:
    lang = request_language(request)
    return page(request, "title", annotator_body(lang), "/static/annotation/annotate.js")


async def admin_page(request: Request) -> Response:
    lang = request_language(request)
    return page(request, "admin_title", admin_body(lang), "/static/annotation/overview.js")


def static_files() -> StaticFiles:
    return StaticFiles(directory=STATIC)
