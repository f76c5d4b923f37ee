"""Writes the tutorials' own examples as two notebooks, English and Chinese, and runs them.

One list of cells: the code cells are shared, each markdown cell is written in both languages, so
the two notebooks stay in step. Executing them (nbclient, kernel python3) saves what the code
prints; every number in an output is computed by qkv's modules, none is typed in.

    PYTHONPATH=src python docs/notebooks/generate.py   # tutorials_en.ipynb, tutorials_zh.ipynb
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
LANGUAGES = ("en", "zh")
TIMEOUT_S = 120


def md(en: str, zh: str) -> tuple[str, dict[str, str]]:
    return ("markdown", {"en": en.strip(), "zh": zh.strip()})


def code(source: str) -> tuple[str, str]:
    return ("code", source.strip())


CELLS = [
    md(
        """
# The tutorials' own examples, run through qkv

Five Chinese Transformer tutorials teach with small examples: a database of ages, a table of
*Demi-Gods and Semi-Devils* (天龙八部) facts, the song title 青花瓷 attending to itself, a
decoder mask for 乘着风, the sentence 我爱吃梨. This notebook runs each of them through qkv's
own modules (`qkv.model`), so every number below is computed, and says where a tutorial's
number differs and why. The same notebook in Chinese: [tutorials_zh.ipynb](tutorials_zh.ipynb).
The concepts page, [docs/concepts.md](../concepts.md), lists the tutorials' mistakes with the
tests that settle them.

`PYTHONPATH=src python docs/notebooks/generate.py` regenerates and reruns both notebooks.
""",
        """
# 教程里的例子，用 qkv 运行

五篇中文 Transformer 教程用一些小例子来讲解：一个年龄数据库、一张《天龙八部》人物表、"青花瓷"
三个字对自己做注意力、"乘着风"的解码器掩码、句子"我爱吃梨"。本笔记本用 qkv 自己的模块
（`qkv.model`）把这些例子逐一运行一遍，所以下面的每个数字都是算出来的；教程里的数字和算出的
不一样时，这里会说明原因。英文版：[tutorials_en.ipynb](tutorials_en.ipynb)。概念页
[docs/zh/concepts.md](../zh/concepts.md) 列出了教程中的错误以及判定它们的测试。

`PYTHONPATH=src python docs/notebooks/generate.py` 会重新生成并运行这两个笔记本。
""",
    ),
    code(
        """
import math

import torch

from qkv.model import (
    MultiHeadedAttention,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    causal_mask,
    combine,
    padding_mask,
    scaled_dot_product_attention,
    softmax_attention,
)


def row(values) -> str:
    return " ".join(f"{float(v):.4f}" for v in values)
""",
    ),
    md(
        """
## 1. A query against a database (tutorial 002)

Tutorial 002 stores four ages under four names and encodes each name as a key vector:
张三 [1, 2, 0] (twice, ages 18 and 20), 李四 [0, 0, 2] (22), 张伟 [1, 4, 0] (19); a first
coordinate of 1 means the surname 张. The query "the mean age of everyone named 张" is [1, 0, 0].
Its dot products with the keys are [1, 1, 0, 1]; the tutorial then writes
softmax([1, 1, 0, 1]) = [1/3, 1/3, 0, 1/3] and gets the answer 19. qkv's
`scaled_dot_product_attention` computes the same lookup (with `scale=1.0`: the tutorial does not
divide by √d_k):
""",
        """
## 1. 对一个数据库做查询（教程 002）

教程 002 用四个名字存了四个年龄，并把每个名字编码成一个键向量：张三 [1, 2, 0]（两次，年龄 18 和
20）、李四 [0, 0, 2]（22）、张伟 [1, 4, 0]（19）；第一个坐标为 1 表示姓张。查询"所有姓张的人的
平均年龄"是 [1, 0, 0]，它和各个键的点积是 [1, 1, 0, 1]；教程接着写 softmax([1, 1, 0, 1]) =
[1/3, 1/3, 0, 1/3]，得到答案 19。qkv 的 `scaled_dot_product_attention` 做同样的查询（`scale=1.0`：
教程没有除以 √d_k）：
""",
    ),
    code(
        """
keys = torch.tensor([[1, 2, 0], [1, 2, 0], [0, 0, 2], [1, 4, 0]], dtype=torch.float64)
values = torch.tensor([[18], [20], [22], [19]], dtype=torch.float64)  # 张三 张三 李四 张伟
query = torch.tensor([[1, 0, 0]], dtype=torch.float64)

answer, weights = scaled_dot_product_attention(query, keys, values, scale=1.0)
print("scores ", row((query @ keys.T)[0]))
print("weights", row(weights[0]))
print("answer ", f"{answer.item():.4f}")
""",
    ),
    md(
        """
The weights are not [1/3, 1/3, 0, 1/3]: e⁰ = 1, so 李四's score of 0 still takes a weight, and
the answer is not 19. A score of 0 does not remove a key; a mask does (qkv's masks: `True` = may
attend). With 李四 masked, the three 张 share the weight equally and the answer is the tutorial's
19. A sharper query (ten times longer) comes close to the same without a mask, and the paper's
scale 1/√3 makes the weights flatter instead:
""",
        """
权重并不是 [1/3, 1/3, 0, 1/3]：e⁰ = 1，所以李四的分数 0 仍然分到权重，答案也不是 19。分数为 0
并不会去掉一个键，掩码才会（qkv 的掩码：`True` 表示可以关注）。把李四掩掉后，三个姓张的人平分
权重，答案就是教程的 19。不用掩码、把查询放大十倍（更"尖锐"）也能接近这个结果；而论文的缩放
1/√3 反而让权重更平：
""",
    ),
    code(
        """
surname_zhang = keys[:, 0] == 1  # True = may attend
masked, masked_weights = scaled_dot_product_attention(
    query, keys, values, mask=surname_zhang, scale=1.0
)
print("masked  weights", row(masked_weights[0]), " answer", f"{masked.item():.4f}")
sharp, sharp_weights = scaled_dot_product_attention(10 * query, keys, values, scale=1.0)
print("10 x q  weights", row(sharp_weights[0]), " answer", f"{sharp.item():.4f}")
scaled, scaled_weights = scaled_dot_product_attention(query, keys, values)  # 1 / sqrt(3)
print("scaled  weights", row(scaled_weights[0]), " answer", f"{scaled.item():.4f}")
""",
    ),
    md(
        """
## 2. Soft attention over the 段誉 table (tutorial 000)

Tutorial 000's keys are four facts, 段誉's signature skill (六脉神剑), his father (段延庆), his
sworn brothers (乔峰和虚竹) and 乔峰's signature skill (降龙十八掌), and it asks "what is the
signature skill of 段誉's sworn brother?". It gives the facts the attention weights 7, 1, 9 and 5
and says that combining the high-scoring answers gives the right one. Two things do not hold.
First, 7, 1, 9, 5 are scores, not weights: weights sum to 1. As fractions of their sum or through
a softmax (what attention does) they become:
""",
        """
## 2. 在"段誉"表上做软注意力（教程 000）

教程 000 的键是四条事实：段誉的招牌武功（六脉神剑）、段誉的生父（段延庆）、段誉的结拜兄弟
（乔峰和虚竹）、乔峰的招牌武功（降龙十八掌），问题是"段誉结拜兄弟的招牌武功是什么？"。教程给
这四条事实的注意力权重是 7、1、9、5，并说把高分答案结合起来就能得到正确答案。这里有两处不成立。
第一，7、1、9、5 是分数，不是权重：权重之和为 1。按占总和的比例，或者经过 softmax（注意力的
做法），它们变成：
""",
    ),
    code(
        """
facts = ["段誉的招牌武功", "段誉的生父", "段誉的结拜兄弟", "乔峰的招牌武功"]
answers = ["六脉神剑", "段延庆", "乔峰和虚竹", "降龙十八掌"]
tutorial = torch.tensor([7.0, 1.0, 9.0, 5.0], dtype=torch.float64)
print("sum      ", f"{tutorial.sum().item():.0f}")
print("fractions", row(tutorial / tutorial.sum()))
print("softmax  ", row(torch.softmax(tutorial, -1)))
""",
    ),
    md(
        """
Second, the question needs two lookups: who the sworn brother is, then that person's skill. One
attention layer returns a weighted mean of the values, so it can only blend the four answers; the
right one, 降龙十八掌, gets little of the softmax above. Below, each fact's key is built from
features (whose fact, which relation), with the query "段誉 + sworn brother + signature skill".
Whatever the sharpness, one lookup puts less than 1/4 on 降龙十八掌 (its key matches one feature
of three, 六脉神剑's and 乔峰和虚竹's two). Two lookups, as two stacked layers do, find it: the
first asks for 段誉's sworn brother and returns 乔峰 (as features), the second asks for 乔峰's
signature skill.
""",
        """
第二，这个问题需要两次查找：先查结拜兄弟是谁，再查这个人的招牌武功。一层注意力返回的是值的加权
平均，只能把四个答案混在一起；正确答案降龙十八掌在上面的 softmax 中只分到很少的权重。下面用特征
（谁的事实、什么关系）构造每条事实的键，查询是"段誉 + 结拜兄弟 + 招牌武功"。无论查询多尖锐，
一次查找分给降龙十八掌的权重都小于 1/4（它的键只匹配三个特征中的一个，六脉神剑和乔峰和虚竹的键
匹配两个）。两次查找（相当于两层叠在一起）就能找到它：第一次问段誉的结拜兄弟，返回乔峰（以特征
表示），第二次问乔峰的招牌武功。
""",
    ),
    code(
        """
# features: 段誉, 乔峰, 虚竹, signature skill, father, sworn brothers
fact_keys = torch.tensor(
    [[1, 0, 0, 1, 0, 0], [1, 0, 0, 0, 1, 0], [1, 0, 0, 0, 0, 1], [0, 1, 0, 1, 0, 0]],
    dtype=torch.float64,
)
who = torch.tensor(  # each answer as a person, in the same features (a skill is nobody)
    [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
    dtype=torch.float64,
)
duan_yu, qiao_feng, skill, brothers = (torch.eye(6, dtype=torch.float64)[i] for i in (0, 1, 3, 5))
question = (duan_yu + brothers + skill)[None]

for sharpness in (1.0, 4.0, 16.0):
    _, one = scaled_dot_product_attention(sharpness * question, fact_keys, who, scale=1.0)
    print(f"one lookup, sharpness {sharpness:4.1f}:", row(one[0]), "->", answers[one.argmax()])

first, w1 = scaled_dot_product_attention(8 * (duan_yu + brothers)[None], fact_keys, who, scale=1.0)
second_query = first + skill  # layer 2's query is made from layer 1's output
_, w2 = scaled_dot_product_attention(8 * second_query, fact_keys, who, scale=1.0)
print("lookup 1 (段誉's sworn brother):", row(w1[0]), "->", answers[w1.argmax()])
print("lookup 2 (his signature skill): ", row(w2[0]), "->", answers[w2.argmax()])
""",
    ),
    md(
        """
## 3. 青花瓷 attending to itself, Q = K = V (tutorial 000)

Tutorial 000 embeds the three characters 青, 花, 瓷 as random 10-dimensional vectors and uses the
embeddings themselves as Q, K and V: scores `emb @ emb.T / sqrt(10)` (its formula says /10; the
code divides by √10, which is right), then `softmax(...) @ emb`. qkv's
`scaled_dot_product_attention(emb, emb, emb)` computes exactly that. With Q = K the score matrix
is symmetric and each row's largest score is on the diagonal (xᵢ·xᵢ = |xᵢ|²):
""",
        """
## 3. "青花瓷"对自己做注意力，Q = K = V（教程 000）

教程 000 把"青""花""瓷"三个字嵌入成随机的 10 维向量，并直接用这些嵌入作为 Q、K 和 V：分数是
`emb @ emb.T / sqrt(10)`（它的公式写的是 /10；代码除以 √10，代码是对的），然后 `softmax(...) @
emb`。qkv 的 `scaled_dot_product_attention(emb, emb, emb)` 做的正是这个计算。Q = K 时分数矩阵是
对称的，每行最大的分数在对角线上（xᵢ·xᵢ = |xᵢ|²）：
""",
    ),
    code(
        """
torch.manual_seed(0)
emb = torch.nn.Embedding(3, 10)(torch.tensor([0, 1, 2])).detach().double()  # 青 花 瓷
out, w = scaled_dot_product_attention(emb, emb, emb)
scores = emb @ emb.T / math.sqrt(10)
tutorial_code = torch.softmax(scores, dim=-1) @ emb
print("equals the tutorial's code:", torch.allclose(out, tutorial_code))
print("scores symmetric:", torch.allclose(scores, scores.T))
for name, s, weights in zip("青花瓷", scores, w, strict=True):
    print(name, "scores", row(s), " weights", row(weights))
on_diagonal = (w.argmax(-1) == torch.arange(3)).sum().item()
print("rows whose largest weight is on the diagonal:", on_diagonal, "of 3")
""",
    ),
    md(
        """
The tutorial prints its own (random) scores; the softmax of its matrix gives these weights. In
the Transformer, self-attention does not use Q = K = V: one X goes through three matrices W_Q,
W_K, W_V, and the scores are no longer symmetric (qkv's `MultiHeadedAttention`, one head):
""",
        """
教程打印了它自己的（随机）分数矩阵；对它做 softmax 得到下面的权重。在 Transformer 中，自注意力并
不使用 Q = K = V：同一个 X 经过三个矩阵 W_Q、W_K、W_V，分数矩阵也就不再对称（qkv 的
`MultiHeadedAttention`，一个头）：
""",
    ),
    code(
        """
tutorial_scores = torch.tensor(
    [[3.2897, 0.7432, -1.1652], [0.7432, 1.3647, -1.1707], [-1.1652, -1.1707, 5.6380]],
    dtype=torch.float64,
)
for name, weights in zip("青花瓷", torch.softmax(tutorial_scores, dim=-1), strict=True):
    print(name, "tutorial's weights", row(weights))

torch.manual_seed(0)
mha = MultiHeadedAttention(10, 1).double().eval()
with torch.no_grad():
    q, k, v = mha.project_self(emb[None])
    projected = (q @ k.mT / math.sqrt(10))[0, 0]
print("W_Q != W_K: scores symmetric:", torch.allclose(projected, projected.T))
""",
    ),
    md(
        """
Tutorial 000 then adds the sinusoidal positions to the same three vectors, computing the
frequencies 1/10000^(2i/d) as exp(−(2i/d)·ln 10000) "because powers are hard to compute". Both
forms are one call in PyTorch and agree to float32 rounding; qkv's `SinusoidalPositionalEncoding`
takes the power directly (in float64):
""",
        """
教程 000 接着给这三个向量加上正弦位置编码，它把频率 1/10000^(2i/d) 写成 exp(−(2i/d)·ln 10000)，
理由是"次方比较难算"。在 PyTorch 中两种写法都是一次调用，结果在 float32 的舍入误差内一致；qkv 的
`SinusoidalPositionalEncoding` 直接计算幂（用 float64）：
""",
    ),
    code(
        """
d_model = 10
i2 = torch.arange(0, d_model, 2).float()
exp_log = torch.exp(i2 * -math.log(10000.0) / d_model)  # the tutorial's div_term
power = 10000.0 ** (-i2 / d_model)
print("div_term, exp/log:", row(exp_log))
print("div_term, power:  ", row(power))
print("largest difference:", f"{(exp_log - power).abs().max().item():.1e}")

position = torch.arange(3).unsqueeze(1)
pe = torch.zeros(3, d_model)
pe[:, 0::2] = torch.sin(position * exp_log)
pe[:, 1::2] = torch.cos(position * exp_log)
qkv_pe = SinusoidalPositionalEncoding(d_model)(torch.zeros(1, 3, d_model))[0]
print("tutorial's PE equals qkv's:", torch.allclose(pe, qkv_pe, atol=1e-6))
""",
    ),
    md(
        """
## 4. The decoder's mask for 乘着风 (tutorial 000)

Tutorial 000 pads the target 乘着风 to five positions, 乘着风<pad><pad>, and draws its mask:
a lower triangle whose last two columns are 0. That is two masks combined: the causal mask (no
query sees a later key) and the padding mask (no query sees a pad). qkv builds each and combines
them with `&`:
""",
        """
## 4. "乘着风"的解码器掩码（教程 000）

教程 000 把目标"乘着风"填充到五个位置，"乘着风<pad><pad>"，并画出了它的掩码：一个下三角，最后两
列为 0。这是两个掩码的组合：因果掩码（查询看不到后面的键）和填充掩码（查询看不到填充位）。qkv
分别构造它们，再用 `&` 组合：
""",
    ),
    code(
        """
vocab = {"<pad>": 0, "乘": 1, "着": 2, "风": 3}
ids = torch.tensor([[vocab[c] for c in "乘着风"] + [vocab["<pad>"]] * 2])
mask = combine(causal_mask(5), padding_mask(ids, vocab["<pad>"]))  # (1, 1, 5, 5)
print(mask[0, 0].int())
tutorial_mask = torch.tensor(
    [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0]]
)
print("equals the tutorial's matrix:", torch.equal(mask[0, 0].int(), tutorial_mask))
""",
    ),
    md(
        """
A masked score is removed before the softmax, so the first row puts all its weight on 乘, the
second shares it between 乘 and 着, and no row gives any weight to a pad (random scores here):
""",
        """
被掩掉的分数在 softmax 之前就被去掉了，所以第一行把全部权重放在"乘"上，第二行在"乘"和"着"之间
分配，没有任何一行给填充位权重（这里用随机分数）：
""",
    ),
    code(
        """
torch.manual_seed(0)
scores = torch.randn(1, 1, 5, 5, dtype=torch.float64)
_, weights = softmax_attention(scores, torch.eye(5, dtype=torch.float64), mask)
for name, w_row in zip(["乘", "着", "风", "<pad>", "<pad>"], weights[0, 0], strict=True):
    print(f"{name:>5}", row(w_row))
print("weight on pads:", f"{weights[..., 3:].sum().item():.4f}")
""",
    ),
    md(
        """
## 5. 我爱吃梨: a self-attention map (tutorial 002)

Tutorial 002 draws the attention weights of 我爱吃梨 as a 4 × 4 map and says each character is
most related to itself. With Q = K = X, the embeddings themselves, that holds in every row; with
the Transformer's W_Q and W_K (qkv's `MultiHeadedAttention`, untrained here) the diagonal is not
special. Each output row is the weighted sum of the value rows, as the tutorial explains:
""",
        """
## 5. "我爱吃梨"：一张自注意力图（教程 002）

教程 002 把"我爱吃梨"的注意力权重画成一张 4 × 4 的图，并说每个字与自身的关联程度最大。当
Q = K = X（直接用嵌入）时，每一行都是这样；换成 Transformer 的 W_Q 和 W_K（qkv 的
`MultiHeadedAttention`，这里未经训练）后，对角线就不再特殊。正如教程所说，每个输出行都是各个值
行的加权和：
""",
    ),
    code(
        """
torch.manual_seed(0)
embedding = TokenEmbedding(4, 16)  # 我 爱 吃 梨
x = embedding(torch.arange(4)[None]).detach().double()  # (1, 4, 16)
_, same = scaled_dot_product_attention(x, x, x)  # Q = K = V = X
mha = MultiHeadedAttention(16, 1).double().eval()
mha.fused = False
with torch.no_grad():
    out, projected = mha(x, need_weights=True)
    _, _, v = mha.project_self(x)
    by_hand = mha.out_proj(projected[0, 0] @ v[0, 0])
for label, w in (("Q = K = X", same[0]), ("W_Q, W_K", projected[0, 0])):
    print(label)
    for name, w_row in zip("我爱吃梨", w, strict=True):
        print(" ", name, row(w_row))
    on_diagonal = (w.argmax(-1) == torch.arange(4)).sum().item()
    print("  rows whose largest weight is on the diagonal:", on_diagonal, "of 4")
print("output = weights @ V, then W_O:", torch.allclose(out[0], by_hand))
""",
    ),
]


def build(language: str) -> nbformat.NotebookNode:
    """The notebook in `language` ("en" or "zh"), without outputs."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    for kind, source in CELLS:
        if kind == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(source[language]))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(source))
    for index, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{index}"  # stable ids: regenerating changes nothing that did not
    return nb


def kernel_env() -> dict[str, str]:
    """This process's environment with PYTHONPATH made absolute: the kernel runs in this folder
    and imports the same qkv as the caller (`PYTHONPATH=src` from a checkout's root)."""
    env = dict(os.environ)
    if env.get("PYTHONPATH"):
        parts = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in parts if p)
    return env


def execute(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Runs every cell in a fresh python3 kernel, in this folder; the outputs are saved in `nb`."""
    client = NotebookClient(
        nb, timeout=TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
    )
    client.execute(env=kernel_env())
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)  # timestamps would change every run
    return nb


def path(language: str) -> Path:
    return HERE / f"tutorials_{language}.ipynb"


def main() -> int:
    for language in LANGUAGES:
        nb = execute(build(language))
        nbformat.write(nb, path(language))
        print(f"wrote {path(language)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
