from django.contrib import admin

from labapp.models import Classroom, Membership


class MembershipInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Classroom)
class ClassroomAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "join_code", "created_at"]
    search_fields = ["name", "join_code"]
    inlines = [MembershipInline]
