// The runmesh admin playground: GraphiQL against this server's endpoint,
// over HTTP for queries and mutations and graphql-ws for subscriptions.
// The admin token is asked for once and kept in sessionStorage, so it
// lives as long as the tab and never appears in a URL or in GraphiQL's
// header editor (which GraphiQL may keep in localStorage).
import { useMemo, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { GraphiQL } from 'graphiql';
import { createGraphiQLFetcher } from '@graphiql/toolkit';
import 'graphiql/style.css';
import './main.css';

const tokenKey = 'runmesh-token';
const mount = document.getElementById('playground');
const endpoint = new URL(mount.dataset.endpoint, location.href);
const socket = new URL(endpoint);
socket.protocol = endpoint.protocol === 'https:' ? 'wss:' : 'ws:';

function fetcherFor(token) {
  // The server reads the same header from the socket's connection_init.
  const auth = { Authorization: `Bearer ${token}` };
  return createGraphiQLFetcher({
    url: endpoint.href,
    subscriptionUrl: socket.href,
    headers: auth,
    wsConnectionParams: auth,
    // gqlgen answers plain JSON here; no multipart reader needed.
    enableIncrementalDelivery: false,
  });
}

function TokenForm({ onToken }) {
  const submit = (e) => {
    e.preventDefault();
    const token = new FormData(e.currentTarget).get('token').trim();
    if (token) onToken(token);
  };
  return (
    <form className="runmesh-token" onSubmit={submit}>
      <label htmlFor="runmesh-token">Admin token</label>
      <input id="runmesh-token" name="token" type="password" autoComplete="off" autoFocus
        placeholder="rmat_…, kept in this tab only" />
      <button type="submit">Use</button>
    </form>
  );
}

function Playground() {
  const [token, setToken] = useState(() => sessionStorage.getItem(tokenKey) || '');
  const fetcher = useMemo(() => (token ? fetcherFor(token) : null), [token]);
  const use = (t) => {
    sessionStorage.setItem(tokenKey, t);
    setToken(t);
  };
  const forget = () => {
    sessionStorage.removeItem(tokenKey);
    setToken('');
  };
  if (!fetcher) {
    return <TokenForm onToken={use} />;
  }
  return (
    <div className="runmesh-playground">
      <div className="runmesh-token">
        <span>runmesh admin · {endpoint.pathname}</span>
        <button type="button" onClick={forget}>Forget token</button>
      </div>
      <GraphiQL fetcher={fetcher} defaultQuery="{ viewer { name role organisation { name } } }" />
    </div>
  );
}

createRoot(mount).render(<Playground />);
