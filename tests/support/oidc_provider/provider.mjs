// The OpenID Provider the SSO tests log in through: node-oidc-provider (a certified OpenID Connect
// implementation: discovery, JWKS, authorization code with PKCE, userinfo, device authorization
// grant) configured here, with the one part every deployment of it writes itself: the login page.
//
//   node provider.mjs CONFIG.json
//
// CONFIG: {"issuer": "http://127.0.0.1:PORT", "port": PORT, "clients": [...], "users_file": PATH}.
// USERS (re-read at every login and every claims request, so a test changes a user's groups at the
// "IdP" by rewriting the file): {"alice": {"password": "...", "sub": "...", "claims": {...}}}.
// Prints "listening ISSUER" once it accepts connections.
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const users = () => JSON.parse(readFileSync(config.users_file, 'utf8'));
const bySub = (sub) => Object.values(users()).find((user) => user.sub === sub);
const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

// A fresh signing key per run, as a real provider has its own (never the library's dev keys).
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: `test-${Date.now()}`, alg: 'RS256', use: 'sig' };

const page = (title, body) => `<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>${escape(title)}</title></head><body><main><h1>${escape(title)}</h1>${body}</main></body></html>`;

const provider = new Provider(config.issuer, {
  clients: config.clients,
  jwks: { keys: [signingKey] },
  async findAccount(ctx, sub) {
    if (!bySub(sub)) return undefined;
    return { accountId: sub, claims: async () => ({ ...(bySub(sub)?.claims ?? {}), sub }) };
  },
  scopes: ['openid', 'profile', 'email', 'groups', 'offline_access'],
  claims: {
    openid: ['sub'],
    profile: ['name', 'preferred_username'],
    email: ['email', 'email_verified'],
    groups: ['groups'],
  },
  // Every authorization code request must carry a PKCE challenge (S256), confidential client or not.
  pkce: { required: () => true },
  cookies: { keys: ['gpupool-tests-only'] },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    deviceFlow: {
      enabled: true,
      userCodeInputSource: (ctx, form, out, err) => {
        ctx.body = page('Device sign-in', `${err ? '<p role="alert">That code is not valid.</p>' : ''}${form}
          <button type="submit" form="op.deviceInputForm">Continue</button>`);
      },
      userCodeConfirmSource: (ctx, form, client, deviceInfo, userCode) => {
        ctx.body = page('Confirm device', `<p>Code <code>${escape(userCode)}</code> for
          ${escape(client.clientName || client.clientId)}</p>${form}
          <button type="submit" form="op.deviceConfirmForm">Continue</button>
          <button type="submit" form="op.deviceConfirmForm" name="abort" value="yes">Abort</button>`);
      },
      successSource: (ctx) => { ctx.body = page('Device signed in', '<p>You may close this page.</p>'); },
    },
  },
});

const readForm = (req) => new Promise((resolve, reject) => {
  let data = '';
  req.on('data', (chunk) => { data += chunk; });
  req.on('end', () => resolve(new URLSearchParams(data)));
  req.on('error', reject);
});

const loginForm = (uid, error) => page('Sign in to the test IdP', `
  ${error ? `<p role="alert">${escape(error)}</p>` : ''}
  <form method="post" action="/interaction/${escape(uid)}/login">
    <label for="username">Username</label> <input id="username" name="username" autocomplete="username">
    <label for="password">Password</label> <input id="password" name="password" type="password">
    <button type="submit">Sign in</button>
  </form>`);

// The login page checks the password; consent is given at once, as an organisation's IdP does for
// its own first-party applications.
async function interaction(req, res, submitted) {
  const details = await provider.interactionDetails(req, res);
  const { uid, prompt, params, session } = details;
  if (prompt.name === 'login' && !submitted) {
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.end(loginForm(uid));
  } else if (prompt.name === 'login') {
    const form = await readForm(req);
    const user = users()[form.get('username')];
    if (!user || user.password !== form.get('password')) {
      res.statusCode = 401;
      res.setHeader('content-type', 'text/html; charset=utf-8');
      res.end(loginForm(uid, 'Wrong username or password.'));
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: user.sub } },
      { mergeWithLastSubmission: false });
  } else if (prompt.name === 'consent') {
    const grant = details.grantId ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  } else {
    res.statusCode = 501;
    res.end(`prompt ${prompt.name} is not handled by the test IdP`);
  }
}

const handle = provider.callback();
const server = createServer((req, res) => {
  const match = new URL(req.url, config.issuer).pathname.match(/^\/interaction\/([\w-]+)(\/login)?$/);
  if (!match) {
    handle(req, res);
    return;
  }
  interaction(req, res, match[2] !== undefined && req.method === 'POST').catch((error) => {
    res.statusCode = 400;
    res.setHeader('content-type', 'text/plain; charset=utf-8');
    res.end(`interaction failed: ${error.message}`);
  });
});
server.listen(config.port, '127.0.0.1', () => console.log(`listening ${config.issuer}`));
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
