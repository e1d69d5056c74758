#!/bin/sh
# build.sh: GraphiQL and this page's entry (main.jsx) into one minified script and one stylesheet,
# dist/graphiql-VERSION.min.js and .css, which graph/playground.go embeds (make playground).
# The packages come from package-lock.json alone (npm ci, install scripts off: esbuild's binary is
# an optional dependency, so none are needed), and esbuild's output depends only on its input, so
# the same lockfile gives the same bytes: commit dist/ with the lockfile that made it.
set -eu
cd "$(dirname "$0")"
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
version=$(node -p 'require("./node_modules/graphiql/package.json").version')
rm -rf dist && mkdir dist
# Licence comments go to the end of each file: the bundle carries its packages' notices.
node_modules/.bin/esbuild main.jsx --bundle --minify --jsx=automatic --format=iife --target=es2020 \
  --define:process.env.NODE_ENV='"production"' --legal-comments=eof --charset=utf8 --log-level=warning \
  --outfile="dist/graphiql-$version.min.js"
ls -l dist
