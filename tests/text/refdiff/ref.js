// Reference side of the differential check: encode each {"text"} line of stdin
// with the Hugging Face tokenizers library (Node binding) and print
// {"ids", "text": decode(ids, false), "skip": decode(ids, true)} per line.
// Usage: NODE_PATH=.../node_modules node ref.js tokenizer.json ADD_SPECIAL(0|1)
'use strict';
const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');
(async () => {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const add = process.argv[3] === '1';
  const lines = fs.readFileSync(0, 'utf8').split('\n').filter((l) => l.length);
  const out = [];
  for (const l of lines) {
    const e = await tok.encode(JSON.parse(l).text, null, { addSpecialTokens: add });
    const ids = Array.from(e.getIds());
    out.push(JSON.stringify({ ids, text: await tok.decode(ids, false), skip: await tok.decode(ids, true) }));
  }
  fs.writeFileSync(1, out.join('\n') + '\n');
})();
