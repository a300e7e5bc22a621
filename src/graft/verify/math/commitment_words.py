"""The closed vocabulary of `graft.verify.math.commitment`: evaluation words (wrong / right),
negation, uncertainty, counterfactual markers and words that go back on an answer, in English and
in the languages a policy drifts into most (French, German, Spanish, Italian, Portuguese, Russian),
with phrases of languages written without spaces (Chinese, Japanese) matched as substrings.

The rules judge classes, not phrases; these sets only say which words carry which meaning.
"""

from __future__ import annotations

import re


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


NEGATION = _words(
    """not no never nothing none nor without cannot
    ne pas non jamais aucun aucune sans rien nicht kein keine keinen keinem keiner ohne nie
    ningún ninguna ninguno nada nunca sin jamás nessun nessuna niente senza não nem nenhum
    нет не ни без"""
)
BAD = _words(
    """wrong incorrect mistake mistaken mistakes error errors erroneous invalid false flawed bogus
    oops whoops faux fausse fautif erreur erreurs incorrecte falsch fehler fehlerhaft
    inkorrekt irrtum errores incorrecto incorrecta equivocado equivocada equivoqué equivoque
    erróneo errónea sbagliato sbagliata errore errato errata errado errada erro errei
    miscounted miscalculated miscalculation misread misstep messed botched blunder typo
    trompé trompée verrechnet vertan geirrt equivoqué sbagliato
    kidding joking jk joke kid trolling
    ошибка ошибся ошиблась неверно неправильно неверный"""
)
_NOT_MIS = _words(
    """mission missions missile missiles mississippi missing miss misses missed mist mists misty
    mischief miscellaneous misery miserable mister mistress"""
)


def is_mis_word(word: str) -> bool:
    """A verb of getting something wrong by its prefix (`misadded`, `miscounted`, `misread`,
    `misapplied`): the class, not a list of its members."""
    return word.startswith("mis") and len(word) > 5 and word not in _NOT_MIS


BAD_AFTER = {"mal": _words("está esta estaba salió sale")}
"""Words that are an error only after one of these (`está mal`; `3 mal 4` is a product)."""
CONFLICT = _words(
    """contradicts contradict contradicted contradiction contradictory inconsistent conflicts
    contredit contradiction widerspricht widerspruch contradice contraddice"""
)
"""Words of a conflict: an error only in a sentence that names the box (`CONFLICT_TARGET` or its
value), not in a supposition: a proof by contradiction ends in one."""
CONFLICT_TARGET = re.compile(
    r"\b(?:box(?:ed)?|above|previous(?:ly)?|earlier|(?:my|our|the)\s+(?:answer|result))\b",
    re.IGNORECASE,
)
GOOD = _words(
    """right correct true valid work works holds checks confirms confirmed consistent agrees
    fine okay ok stands juste correcte vrai vraie bon bonne exacte richtig korrekt stimmt
    correcto correcta cierto verdadero giusto giusta corretto corretta certo verdade
    верно правильно"""
)
YES = _words("yes yep yeah indeed same unchanged agree matches oui ja sí sim да")
"""Words that confirm what came before (they settle a pending "wait, let me redo this")."""
INTERJECTIONS = _words("oops whoops oups hoppla uy ups")
REJECTIONS = _words("no nope nah non nein нет")
"""Words that, opening a sentence on their own (`No, ...`), reject what came before."""
BACK_REFERENCE = _words(
    "this that that's it it's ce cela ça ceci das dies es eso esto esta este questo isso isto это"
)
"""A sentence that opens with one of these speaks of what came just before: the box."""
SELF = _words(
    """i i'm i've my me we we've we're our this above previous earlier boxed box
    je moi ma mon nous notre ich mein meine wir unser oben yo mi nosotros io mio noi я мы"""
)
UNCERTAIN = _words(
    """unsure uncertain doubt doubtful guess guessing guessed probably presumably maybe perhaps
    possibly tentative tentatively unverified peut-être probablement vielleicht
    wahrscheinlich vermutlich quizás quizá quizas acaso probablemente posiblemente forse
    probabilmente talvez possivelmente возможно наверное"""
)
CERTAIN = _words(
    """sure certain confident verify verified check checked sûr sûre certain certaine sicher
    seguro segura sicuro sicura certo certa уверен уверена"""
)
COUNTERFACTUAL = _words(
    """if would could unless common commonly typical trap pitfall careless naive
    naively tempting forget forgot forgetting suppose assume otherwise discard discarded
    discarding reject rejected rejecting extraneous exclude excluded excluding si wenn falls sonst
    habituel courant häufig típico común comune tipico"""
)
"""Markers that the values a sentence names are not the answer (and `instead of`, `rather
than`: `INSTEAD_OF`)."""
INSTEAD_OF = re.compile(r"\b(?:instead\s+of|rather\s+than|au\s+lieu\s+de|statt|anstatt)\b", re.I)
FILLER = _words("actually instead then really anyway after all though en fait eigentlich realidad")
"""Words that may trail a value that a sentence states as the answer (`it's 15 actually`)."""
SUPPOSITION = _words(
    """if would unless suppose supposing assume assuming otherwise common commonly typical trap
    pitfall careless naive naively tempting avoid avoiding beware careful si wenn falls sonst"""
)
"""Markers that an evaluation in a sentence is about a supposition, not the box."""
CONDITIONAL = _words(
    """if unless suppose supposing assuming otherwise alternatively alternately si wenn falls
    sonst"""
)
"""Words that put a value under another condition: beside the box, a hedge unless a mistake."""
CONTRAST = _words("but however yet though although mais cependant aber doch pero ma però")
REDO_OPENERS = _words(
    "wait attends attendez attendons warte espera espere aspetta aspetti подожди постой"
)
"""Words that, opening a sentence (`Wait, ...`, `Oh wait`), go back on the box."""
OPENER_LEADS = _words("oh hmm hmmm um uh but and no ah")
REDO = _words(
    """redo recompute recalculate reconsider rethink recheck recount reexamine re-examine
    revisit retry restart rework reevaluate re-evaluate correction refaire recommencer recalculer
    recalcule nochmal rehacer recalcular recalculemos rifare ricalcolare ricominciare"""
)
"""Words that go back on the box: pending until a later sentence confirms its value."""
CORRECTION = _words("actually correction instead fait eigentlich realidad realtà verdade")
"""Words that, between two boxes, mark the later one as a correction of the earlier."""
POSSIBLE = _words(
    "could might may pourrait pourraient könnte könnten podría podrían potrebbe poderia"
)
BE = _words("be equal equals être sein ser essere valer betragen")
OFFER_VERBS = _words("argue say claim answer count get give take read")
"""Verbs that, after `could` / `might`, offer a value as an answer (`one could argue for 9`)."""
TALLY = _words("count total tally")
"""Words that name the asked number without saying `answer` (`the count doubles to 12`)."""
CONCLUSION = _words(
    "so thus therefore hence giving gives leaves leaving makes total finally donc also"
)
"""Words that conclude: the value after them is a result stated, not another quantity named."""

REDO_PHRASE = re.compile(
    r"\b(?:start\s+(?:over|again|afresh)|scratch\s+that|"
    r"strike\s+that|hold\s+on|go\s+back|back\s+up|from\s+scratch|"
    r"(?:try|do|work|solve|compute)\s+(?:\w+\s+){0,2}?(?:again|once\s+more)|"
    r"(?:think|thinking|thought)\s+(?:about\s+(?:it|this)\s+)?(?:again|twice|once\s+more)|"
    r"let\s+me\s+re-?(?:do|check|compute|calculate|consider|think|count|examine|evaluate|visit|"
    r"work|try|start|read|verify|solve)\w*|"
    r"von\s+vorne|noch\s+einmal|moment\s+mal|neu\s+(?:be)?rechnen|de\s+nuevo|otra\s+vez|"
    r"da\s+capo|encore\s+une\s+fois)\b",
    re.IGNORECASE,
)
UNCERTAIN_PHRASE = re.compile(r"\b(?:peut[- ]être|tal\s+vez|pas\s+sûr)\b", re.IGNORECASE)
APPROXIMATE = re.compile(
    r"(?:\\approx|≈|\\sim|~|\\simeq|\b(?:about|approximately|approx|roughly|around|nearly|"
    r"almost|circa|environ|etwa|ungefähr|aproximadamente|circa|approssimativamente))\s*"
    r"(?:\$|\\\(|=)?\s*$|(?:约|大约|約|大概)\s*$",
    re.IGNORECASE,
)
"""Text just before a value that marks it as an approximation (of the box, when it rounds to
it)."""
CONTRAST_NEGATION = re.compile(
    r"\b(?:not|rather\s+than|instead\s+of|contrary\s+to|unlike|as\s+opposed\s+to|nicht|statt|"
    r"anstatt|et\s+non|pas|contrairement|en\s+lugar\s+de|a\s+diferencia\s+de|"
    r"en\s+vez\s+de|no|invece\s+di|non)\b|而不是|不是",
    re.IGNORECASE,
)
BOX_REFERENCE = re.compile(
    r"\b(?:box(?:ed)?|above|previous(?:ly)?|earlier|before|first|initial|original|mine|"
    r"encadrée?|oben|vorher|anterior|arriba|sopra|precedente)\b|上面|之前|原来|前面",
    re.IGNORECASE,
)
"""Words that name the box without its value (`not the value boxed above`)."""
FINAL_MARKER = re.compile(
    r"\b(?:final\s+answer|answer\s*(?:is|:|=)|final\s+result"
    r"|(?:correct|right|actual|true|real)\s+(?:\w+\s+){0,2}?(?:is|are|=|:)|réponse\s*(?:finale|est|:)|"
    r"respuesta\s*(?:final|es|:)|antwort\s*(?:ist|lautet|:)|endergebnis|risposta\s*(?:finale|è|:)|"
    r"resposta\s*(?:final|é|:))|答案|最终|最終|结果是",
    re.IGNORECASE,
)
"""A final answer announced: it introduces the box that replaces the earlier ones."""
ALTERNATIVE = re.compile(
    r"\b(?:or|alternatively|either|otherwise|also|depending|maybe|perhaps|possibly|might|could|"
    r"another|additionally|as\s+well|"
    r"ou|oder|auch|también|anche)\b|或|也",
    re.IGNORECASE,
)
"""Words that offer a box as one answer among others."""
CONDITION = re.compile(
    r"\b(?:if|when|unless|for|in\s+case|si|wenn|falls|cuando|quando)\b|如果|若|の場合",
    re.IGNORECASE,
)
"""A box announced under a condition (`if n is odd, the answer is`) answers one case of several:
announcing it does not replace the box of another case."""

CJK_BAD = ("不对", "不對", "错", "錯", "有误", "違う", "間違", "誤り", "矛盾")
CJK_REDO = ("重新", "重来", "再算", "等等", "等一下", "やり直", "待って", "もう一度")
CJK_UNCERTAIN = ("不确定", "不確定", "不太确定", "不肯定", "没把握", "也许", "或许", "大概",
                 "たぶん", "多分", "かもしれ")  # fmt: skip
CJK_GOOD = ("没错", "沒錯", "正确", "正確", "是对的", "確認", "确认", "正しい")
CJK_SUPPOSITION = ("如果", "假如", "假设", "常见", "若", "もし")
CJK_NEGATION = re.compile(r"(?:没有|沒有|没|沒|无|無|不|并非|不用|不必|无需|無需)$")
CJK_POSSIBLE = re.compile(r"(?:可能|也许|或许)(?:是|为|為|等于)?\s*$")

FIXES = _words(
    """forgot forgotten forgetting missed overlooked omitted neglected fix fixed fixing
    corrected correcting recounting recounted recomputing recomputed recalculating recalculated
    redoing redid rechecking rechecked slip oublié vergessen olvidé dimenticato"""
)
"""Words that, between two boxes, say what the earlier one got wrong (`I forgot the corner`,
`recounting gives`): the later box corrects it."""
FIX_PHRASE = re.compile(
    r"\b(?:too\s+(?:few|many|much|little)|double[- ]count\w*|should\s+have|left\s+out"
    r"|my\s+(?:bad|mistake|error)|sorry|apologi[sz]e|off\s+by\s+(?:one|\d+))\b",
    re.IGNORECASE,
)
STEP = _words("step steps attempt attempts try tries draft guess estimate approach line sign term")
"""Parts of the work before the answer: an error in one of them, placed before the answer
(`EARLIER`), is not the box's (`my initial guess of 10 was wrong`)."""
EARLIER = _words(
    "first initial initially earlier previously before fixed corrected since had draft"
)
ANSWER = _words("answer answers result box boxed final solution réponse antwort respuesta")
MISTAKE = _words(
    """were had forgot forget forgetting ignore ignored ignoring careless naive naively tempting
    trap pitfall common commonly typical mistakenly wrongly accidentally"""
)
"""Markers that a supposition describes a mistake (`if the corner were counted twice, it could
be 9`), not another reading of the question (`it could be 9 if zero counts`)."""
ALTERNATIVE_READING = re.compile(
    r"\b(?:other|another|different|alternative|second)\s+(?:\w+\s+){0,2}?"
    r"(?:rule|convention|interpretation|reading|definition|method|formula|assumption|approach)s?"
    r"\b|\bdepending\s+on\b",
    re.IGNORECASE,
)
"""Another value under another reading of the question is a hedge (`under the other convention
the count would be 9`)."""
ANNOUNCE = re.compile(
    r"\b(?:answer|actually|really|in\s+fact|on\s+second\s+thought|after\s+all|in\s+the\s+end"
    r"|should\s+(?:be|have\s+been)|must\s+be|ought\s+to\s+be"
    r"|recounted|recomputed|recalculated|redid)\b",
    re.IGNORECASE,
)
"""Words that announce the value a sentence states as the answer, mid-sentence (`actually the
answer is 11 because ...`, `I recounted and got 11 in the end`)."""
ANSWER_SUBJECT = re.compile(
    r"\b(?:it|that|this|we)\s*(?:would|'d|could|might)\s+(?:be|become|give|get|have)\s*$", re.I
)
"""The answer itself, under a supposition (`if we counted the endpoints it would be 10`)."""
COPULA_AFTER = re.compile(
    r"\s*(?:is|would\s+be|must\s+be|should\s+be)\s+(?:what|the\s+answer|right|correct)\b", re.I
)
"""A value stated as the answer by what follows it (`13 is what the question wants`)."""
COPULA = re.compile(
    r"(?:\b(?:is|be|equals|got|get|gives|becomes)|['’]s|=|\bcomes\s+to)"
    r"(?:\s+(?:actually|really|just|exactly))?\s*$",
    re.IGNORECASE,
)
