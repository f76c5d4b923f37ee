"""Parallel-looking English and Chinese sentences for the tests that train a small tokenizer."""

EN = ["A man is riding a bicycle down the street.", "Two dogs are playing in the snow.",
      "A woman sings on a small stage.", "Children are running through a park.",
      "The cat sleeps on the warm window sill.", "An old man reads a newspaper on a bench.",
      "A group of people stand outside a building.", "A girl in a red dress jumps into the water.",
      "Three boys play football on the beach.", "A chef cooks noodles in a busy kitchen."]
ZH = ["一个男人在街上骑自行车。", "两只狗在雪地里玩耍。", "一个女人在小舞台上唱歌。", "孩子们在公园里跑步。",
      "猫在温暖的窗台上睡觉。", "一位老人坐在长椅上看报纸。", "一群人站在大楼外面。", "一个穿红裙子的女孩跳进水里。",
      "三个男孩在海滩上踢足球。", "一位厨师在繁忙的厨房里煮面条。"]
