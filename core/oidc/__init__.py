"""Single sign-on with OpenID Connect: gpupool as the client of an organisation's identity provider.

`client.py` is the dashboard's login (authorization code with PKCE) and the checks every login
passes; `device.py` the CLI's (the device authorization grant, RFC 8628); `claims.py` reads the
user name and groups out of the claims. Who the login becomes in gpupool (the account, its teams
and role) is `allocation.services.sso`'s, from the `sso:` section of the configuration.

authlib rather than mozilla-django-oidc: it discovers the provider from its issuer URL (the other
needs every endpoint configured by hand), does PKCE, nonce and JWKS checks with key rotation, and
the same client serves the device grant, which mozilla-django-oidc has no part for.
"""
